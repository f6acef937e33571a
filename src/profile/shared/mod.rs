//! What several profiles read and select alike, so that no profile is another's
//! library: the block and NVMe event layouts, the NVMe command tracker, the block I/O
//! columns and the selection flags.

pub mod block_events;
pub mod cmd;
pub mod cmd_columns;
pub mod device_io;
pub mod nvme_events;
#[cfg(test)]
pub(crate) mod overflow_sim;
pub mod select;
