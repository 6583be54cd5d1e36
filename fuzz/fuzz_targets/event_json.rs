//! `event_json`: see `subagent_projections::fuzzing::event_json` for the property.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| subagent_projections::fuzzing::event_json(data));
