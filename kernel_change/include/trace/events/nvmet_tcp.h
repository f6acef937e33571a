/* SPDX-License-Identifier: GPL-2.0 */
/*
 * NVMe over TCP target tracepoints for ntprof-perf.
 *
 * Included only by drivers/nvme/target/tcp.c, after "nvmet.h" (struct
 * nvmet_sq, struct nvmet_ctrl).  Every event carries:
 *   cntlid  sq->ctrl->cntlid (== the host's nvme_ctrl->cntlid; 0 before the
 *           queue's Connect completed)
 *   qid     sq->qid, the NVMe submission queue id (0 = admin; == the host's qid)
 *   cid     on-wire command_id (== the host's cid)
 *   opcode  NVMe opcode of the command
 * recv_time is CLOCK_MONOTONIC ns of the software receive timestamp of the
 * skb, 0 when none was available.  See kernel_change/README.md.
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM nvmet_tcp

#if !defined(_TRACE_NVMET_TCP_H) || defined(TRACE_HEADER_MULTI_READ)
#define _TRACE_NVMET_TCP_H

#include <linux/ktime.h>
#include <linux/nvme.h>
#include <linux/tracepoint.h>

#ifndef _NVMET_TCP_TRACE_HELPERS
#define _NVMET_TCP_TRACE_HELPERS
/* CLOCK_REALTIME ns (0 = none) -> CLOCK_MONOTONIC ns (0 = none) */
static inline u64 nvmet_tcp_trace_mono(s64 real_ns)
{
	s64 mono;

	if (real_ns <= 0)
		return 0;
	mono = real_ns - ktime_to_ns(ktime_mono_to_real(0));
	return mono > 0 ? mono : 0;
}

#define NVMET_TCP_TRACE_ID_ASSIGN					\
	do {								\
		__entry->cntlid = sq->ctrl ? sq->ctrl->cntlid : 0;	\
		__entry->qid = sq->qid;					\
		__entry->cid = cmd->common.command_id;			\
		__entry->opcode = cmd->common.opcode;			\
	} while (0)
#endif

/* done_recv_pdu: a command capsule was received (before nvmet_req_init) */
TRACE_EVENT(nvmet_tcp_done_recv_pdu,
	TP_PROTO(struct nvmet_sq *sq, struct nvme_command *cmd, s64 recv_time),
	TP_ARGS(sq, cmd, recv_time),
	TP_STRUCT__entry(
		__field(u64, recv_time)
		__field(u64, slba)
		__field(u16, cntlid)
		__field(u16, qid)
		__field(u16, cid)
		__field(u8, opcode)
		__field(u32, nsid)
		__field(u32, len)
	),
	TP_fast_assign(
		NVMET_TCP_TRACE_ID_ASSIGN;
		__entry->recv_time = nvmet_tcp_trace_mono(recv_time);
		__entry->nsid = le32_to_cpu(cmd->common.nsid);
		__entry->slba = (cmd->common.opcode == nvme_cmd_read ||
				 cmd->common.opcode == nvme_cmd_write) ?
				le64_to_cpu(cmd->rw.slba) : 0;
		__entry->len = le32_to_cpu(cmd->common.dptr.sgl.length);
	),
	TP_printk("cntlid=%u qid=%u cid=%u opcode=%#x nsid=%u slba=%llu len=%u recv_time=%llu",
		  __entry->cntlid, __entry->qid, __entry->cid, __entry->opcode,
		  __entry->nsid, __entry->slba, __entry->len, __entry->recv_time)
);

/*
 * len = a byte count, per event:
 *   exec_read_req / exec_write_req: req->transfer_len at execution
 *   try_send_data_pdu / try_send_r2t / try_send_response: PDU bytes about to
 *     be handed to the socket (less than the PDU on a resumed partial send)
 *   try_send_data: data bytes of the C2HData PDU, fired once all were sent
 */
DECLARE_EVENT_CLASS(nvmet_tcp_len_class,
	TP_PROTO(struct nvmet_sq *sq, struct nvme_command *cmd, u32 len),
	TP_ARGS(sq, cmd, len),
	TP_STRUCT__entry(
		__field(u16, cntlid)
		__field(u16, qid)
		__field(u16, cid)
		__field(u8, opcode)
		__field(u32, len)
	),
	TP_fast_assign(
		NVMET_TCP_TRACE_ID_ASSIGN;
		__entry->len = len;
	),
	TP_printk("cntlid=%u qid=%u cid=%u opcode=%#x len=%u",
		  __entry->cntlid, __entry->qid, __entry->cid, __entry->opcode,
		  __entry->len)
);

DEFINE_EVENT(nvmet_tcp_len_class, nvmet_tcp_exec_read_req,
	TP_PROTO(struct nvmet_sq *sq, struct nvme_command *cmd, u32 len),
	TP_ARGS(sq, cmd, len));

DEFINE_EVENT(nvmet_tcp_len_class, nvmet_tcp_exec_write_req,
	TP_PROTO(struct nvmet_sq *sq, struct nvme_command *cmd, u32 len),
	TP_ARGS(sq, cmd, len));

DEFINE_EVENT(nvmet_tcp_len_class, nvmet_tcp_try_send_data_pdu,
	TP_PROTO(struct nvmet_sq *sq, struct nvme_command *cmd, u32 len),
	TP_ARGS(sq, cmd, len));

DEFINE_EVENT(nvmet_tcp_len_class, nvmet_tcp_try_send_r2t,
	TP_PROTO(struct nvmet_sq *sq, struct nvme_command *cmd, u32 len),
	TP_ARGS(sq, cmd, len));

DEFINE_EVENT(nvmet_tcp_len_class, nvmet_tcp_try_send_response,
	TP_PROTO(struct nvmet_sq *sq, struct nvme_command *cmd, u32 len),
	TP_ARGS(sq, cmd, len));

DEFINE_EVENT(nvmet_tcp_len_class, nvmet_tcp_try_send_data,
	TP_PROTO(struct nvmet_sq *sq, struct nvme_command *cmd, u32 len),
	TP_ARGS(sq, cmd, len));

/*
 * queue_response: the core handed the command back to the transport, either
 * to solicit data (r2t=1) or to complete it (r2t=0).  status = NVMe status
 * (CQE status field >> 1), len = req->transfer_len.
 */
TRACE_EVENT(nvmet_tcp_queue_response,
	TP_PROTO(struct nvmet_sq *sq, struct nvme_command *cmd, u16 status,
		 u32 len, bool r2t),
	TP_ARGS(sq, cmd, status, len, r2t),
	TP_STRUCT__entry(
		__field(u16, cntlid)
		__field(u16, qid)
		__field(u16, cid)
		__field(u8, opcode)
		__field(u8, r2t)
		__field(u16, status)
		__field(u32, len)
	),
	TP_fast_assign(
		NVMET_TCP_TRACE_ID_ASSIGN;
		__entry->status = status;
		__entry->len = len;
		__entry->r2t = r2t;
	),
	TP_printk("cntlid=%u qid=%u cid=%u opcode=%#x r2t=%u status=%#x len=%u",
		  __entry->cntlid, __entry->qid, __entry->cid, __entry->opcode,
		  __entry->r2t, __entry->status, __entry->len)
);

/*
 * setup_c2h_data_pdu / setup_r2t_pdu: a C2HData / R2T PDU was built for the
 * data range data_offset..data_offset+data_len.
 */
DECLARE_EVENT_CLASS(nvmet_tcp_range_class,
	TP_PROTO(struct nvmet_sq *sq, struct nvme_command *cmd,
		 u32 data_offset, u32 data_len),
	TP_ARGS(sq, cmd, data_offset, data_len),
	TP_STRUCT__entry(
		__field(u16, cntlid)
		__field(u16, qid)
		__field(u16, cid)
		__field(u8, opcode)
		__field(u32, data_offset)
		__field(u32, data_len)
	),
	TP_fast_assign(
		NVMET_TCP_TRACE_ID_ASSIGN;
		__entry->data_offset = data_offset;
		__entry->data_len = data_len;
	),
	TP_printk("cntlid=%u qid=%u cid=%u opcode=%#x data_offset=%u data_len=%u",
		  __entry->cntlid, __entry->qid, __entry->cid, __entry->opcode,
		  __entry->data_offset, __entry->data_len)
);

DEFINE_EVENT(nvmet_tcp_range_class, nvmet_tcp_setup_c2h_data_pdu,
	TP_PROTO(struct nvmet_sq *sq, struct nvme_command *cmd,
		 u32 data_offset, u32 data_len),
	TP_ARGS(sq, cmd, data_offset, data_len));

DEFINE_EVENT(nvmet_tcp_range_class, nvmet_tcp_setup_r2t_pdu,
	TP_PROTO(struct nvmet_sq *sq, struct nvme_command *cmd,
		 u32 data_offset, u32 data_len),
	TP_ARGS(sq, cmd, data_offset, data_len));

/* setup_response_pdu: the response capsule was built; status = NVMe status (CQE status >> 1) */
TRACE_EVENT(nvmet_tcp_setup_response_pdu,
	TP_PROTO(struct nvmet_sq *sq, struct nvme_command *cmd, u16 status),
	TP_ARGS(sq, cmd, status),
	TP_STRUCT__entry(
		__field(u16, cntlid)
		__field(u16, qid)
		__field(u16, cid)
		__field(u8, opcode)
		__field(u16, status)
	),
	TP_fast_assign(
		NVMET_TCP_TRACE_ID_ASSIGN;
		__entry->status = status;
	),
	TP_printk("cntlid=%u qid=%u cid=%u opcode=%#x status=%#x",
		  __entry->cntlid, __entry->qid, __entry->cid, __entry->opcode,
		  __entry->status)
);

/*
 * handle_h2c_data_pdu: an H2CData PDU header was received (recv_time = its
 * skb); try_recv_data: all data bytes of an H2CData PDU or of a command's
 * in-capsule data were received (recv_time = skb of the last byte).
 * data_offset/data_len = the data range.
 */
DECLARE_EVENT_CLASS(nvmet_tcp_rx_class,
	TP_PROTO(struct nvmet_sq *sq, struct nvme_command *cmd,
		 u32 data_offset, u32 data_len, s64 recv_time),
	TP_ARGS(sq, cmd, data_offset, data_len, recv_time),
	TP_STRUCT__entry(
		__field(u64, recv_time)
		__field(u16, cntlid)
		__field(u16, qid)
		__field(u16, cid)
		__field(u8, opcode)
		__field(u32, data_offset)
		__field(u32, data_len)
	),
	TP_fast_assign(
		NVMET_TCP_TRACE_ID_ASSIGN;
		__entry->recv_time = nvmet_tcp_trace_mono(recv_time);
		__entry->data_offset = data_offset;
		__entry->data_len = data_len;
	),
	TP_printk("cntlid=%u qid=%u cid=%u opcode=%#x data_offset=%u data_len=%u recv_time=%llu",
		  __entry->cntlid, __entry->qid, __entry->cid, __entry->opcode,
		  __entry->data_offset, __entry->data_len, __entry->recv_time)
);

DEFINE_EVENT(nvmet_tcp_rx_class, nvmet_tcp_handle_h2c_data_pdu,
	TP_PROTO(struct nvmet_sq *sq, struct nvme_command *cmd,
		 u32 data_offset, u32 data_len, s64 recv_time),
	TP_ARGS(sq, cmd, data_offset, data_len, recv_time));

DEFINE_EVENT(nvmet_tcp_rx_class, nvmet_tcp_try_recv_data,
	TP_PROTO(struct nvmet_sq *sq, struct nvme_command *cmd,
		 u32 data_offset, u32 data_len, s64 recv_time),
	TP_ARGS(sq, cmd, data_offset, data_len, recv_time));

#endif /* _TRACE_NVMET_TCP_H */

/* This part must be outside protection */
#include <trace/define_trace.h>
