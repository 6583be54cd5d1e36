//! `checkpoint_decode`: see `subagent_projections::fuzzing::checkpoint_decode` for the property.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| subagent_projections::fuzzing::checkpoint_decode(data));
