//! `record_decode`: see `subagent_projections::fuzzing::record_decode` for the property.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| subagent_projections::fuzzing::record_decode(data));
