//! NVMe target events: `nvmet:nvmet_req_init` and `nvmet:nvmet_req_complete`.
//!
//! They carry the same command fields as the host's (see [`super::nvme`]) at other
//! offsets: `ctrl_id` is the u16 cntlid, `disk` is the namespace's `device_path`, and
//! the completion's `status` is already shifted past the phase bit by the kernel.

use super::nvme::{CmdLayout, DoneLayout, NvmeEvent};
use super::DecodeError;
use crate::tracefs::EventFormat;

#[derive(Debug, Clone, Copy)]
pub(crate) enum NvmetLayout {
    Init(CmdLayout),
    Complete(DoneLayout),
}

impl NvmetLayout {
    /// `None` for an `nvmet` event ntprof-perf does not decode.
    pub(crate) fn bind(fmt: &EventFormat, event: &str) -> Option<Result<NvmetLayout, DecodeError>> {
        match event {
            "nvmet_req_init" => {
                Some(CmdLayout::bind(fmt, "nvmet:nvmet_req_init").map(NvmetLayout::Init))
            }
            "nvmet_req_complete" => {
                Some(DoneLayout::bind(fmt, "nvmet:nvmet_req_complete").map(NvmetLayout::Complete))
            }
            _ => None,
        }
    }

    #[inline]
    pub(crate) fn decode(&self, raw: &[u8]) -> Result<NvmeEvent, DecodeError> {
        match self {
            NvmetLayout::Init(l) => l.decode(raw).map(NvmeEvent::Cmd),
            NvmetLayout::Complete(l) => l.decode(raw).map(NvmeEvent::Done),
        }
    }
}
