//! The drivers: side-effecting reactors that do the IO of one activation or
//! run and report every outcome back through the engine as a command.

mod external;
mod local;

pub(crate) use external::ExternalDriver;
pub(crate) use local::LocalDriver;
