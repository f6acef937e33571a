//! NVMe target events: `nvmet:nvmet_req_init` and `nvmet:nvmet_req_complete`.
//!
//! They carry the same command fields as the host's (see
//! [`crate::profile::shared::nvme_events`]) at other offsets: `ctrl_id` is the u16 cntlid,
//! `disk` is the namespace's `device_path`, and the completion's `status` is already
//! shifted past the phase bit by the kernel.

use crate::decode::{unknown, DecodeError, Layout, Mapped};
use crate::profile::shared::nvme_events::{CmdLayout, DoneLayout, NvmeEvent};
use crate::tracefs::EventFormat;

/// The layout of one event the nvmet profile opens.
pub fn layout(
    fmt: &EventFormat,
    system: &str,
    event: &str,
) -> Result<Box<dyn Layout<NvmeEvent>>, DecodeError> {
    Ok(match (system, event) {
        ("nvmet", "nvmet_req_init") => {
            let l = CmdLayout::bind(fmt, "nvmet:nvmet_req_init")?;
            Box::new(Mapped::new(l, NvmeEvent::Cmd))
        }
        ("nvmet", "nvmet_req_complete") => {
            let l = DoneLayout::bind(fmt, "nvmet:nvmet_req_complete")?;
            Box::new(Mapped::new(l, NvmeEvent::Done))
        }
        _ => return Err(unknown(system, event)),
    })
}
