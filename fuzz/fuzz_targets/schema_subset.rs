//! `schema_subset`: see `subagent_projections::fuzzing::schema_subset` for the property.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| subagent_projections::fuzzing::schema_subset(data));
