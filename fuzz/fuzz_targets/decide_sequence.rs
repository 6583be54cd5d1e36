//! `decide_sequence`: see `subagent_projections::fuzzing::decide_sequence` for the property.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| subagent_projections::fuzzing::decide_sequence(data));
