//! `persona_template`: see `subagent_projections::fuzzing::persona_template` for the property.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| subagent_projections::fuzzing::persona_template(data));
