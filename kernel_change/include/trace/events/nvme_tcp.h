/* SPDX-License-Identifier: GPL-2.0 */
/*
 * NVMe over TCP host tracepoints for ntprof-perf.
 *
 * Included only by drivers/nvme/host/tcp.c, after "nvme.h" (struct nvme_ctrl).
 * Every event carries the identity of the command it belongs to:
 *   ctrl_id  nvme_ctrl->instance (== ctrl_id of nvme:nvme_setup_cmd)
 *   cntlid   controller id assigned by the target (== target's cntlid)
 *   qid      nvme_tcp_queue_id() (== qid of nvme:nvme_setup_cmd, 0 = admin)
 *   cid      on-wire command_id incl. generation bits (== cid of
 *            nvme:nvme_setup_cmd and of the target's nvmet_tcp:* events)
 *   tag      blk-mq tag, 0xffff for the async event request (no struct request)
 * recv_time is CLOCK_MONOTONIC ns of the skb's software receive timestamp,
 * 0 when the skb carried none.  See kernel_change/README.md.
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM nvme_tcp

#if !defined(_TRACE_NVME_TCP_H) || defined(TRACE_HEADER_MULTI_READ)
#define _TRACE_NVME_TCP_H

#include <linux/blkdev.h>
#include <linux/ktime.h>
#include <linux/nvme.h>
#include <linux/tracepoint.h>

#ifndef _NVME_TCP_TRACE_HELPERS
#define _NVME_TCP_TRACE_HELPERS
/* skb->tstamp (CLOCK_REALTIME ns, 0 = none) -> CLOCK_MONOTONIC ns (0 = none) */
static inline u64 nvme_tcp_trace_mono(s64 real_ns)
{
	s64 mono;

	if (real_ns <= 0)
		return 0;
	mono = real_ns - ktime_to_ns(ktime_mono_to_real(0));
	return mono > 0 ? mono : 0;
}

#define NVME_TCP_TRACE_ID_ASSIGN				\
	do {							\
		__entry->ctrl_id = ctrl->instance;		\
		__entry->cntlid = ctrl->cntlid;			\
		__entry->qid = qid;				\
		__entry->cid = cid;				\
		__entry->tag = tag;				\
	} while (0)
#endif

/* queue_rq: a block request was turned into a command capsule */
TRACE_EVENT(nvme_tcp_queue_rq,
	TP_PROTO(struct nvme_ctrl *ctrl, u16 qid, u16 cid, u16 tag,
		 struct request *rq, struct gendisk *disk,
		 struct nvme_command *cmd, bool inline_data),
	TP_ARGS(ctrl, qid, cid, tag, rq, disk, cmd, inline_data),
	TP_STRUCT__entry(
		__field(u64, slba)
		__field(u64, sector)
		__field(int, ctrl_id)
		__field(u16, cntlid)
		__field(u16, qid)
		__field(u16, cid)
		__field(u16, tag)
		__field(u32, nsid)
		__field(u32, len)
		__field(u32, dev)
		__field(u8, opcode)
		__field(u8, write)
		__field(u8, inline_data)
		__array(char, disk, 32)
	),
	TP_fast_assign(
		NVME_TCP_TRACE_ID_ASSIGN;
		__entry->opcode = cmd->common.opcode;
		__entry->write = nvme_is_write(cmd);
		__entry->inline_data = inline_data;
		__entry->nsid = le32_to_cpu(cmd->common.nsid);
		__entry->slba = (cmd->common.opcode == nvme_cmd_read ||
				 cmd->common.opcode == nvme_cmd_write) ?
				le64_to_cpu(cmd->rw.slba) : 0;
		__entry->sector = blk_rq_pos(rq);
		__entry->len = blk_rq_payload_bytes(rq);
		__entry->dev = disk ? disk_devt(disk) : 0;
		memset(__entry->disk, 0, sizeof(__entry->disk));
		if (disk)
			strscpy(__entry->disk, disk->disk_name,
				sizeof(__entry->disk));
	),
	TP_printk("nvme%d cntlid=%u qid=%u cid=%u tag=%u disk=%s opcode=%#x write=%u inline=%u nsid=%u slba=%llu sector=%llu len=%u",
		  __entry->ctrl_id, __entry->cntlid, __entry->qid, __entry->cid,
		  __entry->tag, __entry->disk, __entry->opcode, __entry->write,
		  __entry->inline_data, __entry->nsid, __entry->slba,
		  __entry->sector, __entry->len)
);

/* queue_request: a request (new command, or an R2T's H2C data) enters the send queue */
TRACE_EVENT(nvme_tcp_queue_request,
	TP_PROTO(struct nvme_ctrl *ctrl, u16 qid, u16 cid, u16 tag,
		 u8 state, bool last),
	TP_ARGS(ctrl, qid, cid, tag, state, last),
	TP_STRUCT__entry(
		__field(int, ctrl_id)
		__field(u16, cntlid)
		__field(u16, qid)
		__field(u16, cid)
		__field(u16, tag)
		__field(u8, state)
		__field(u8, last)
	),
	TP_fast_assign(
		NVME_TCP_TRACE_ID_ASSIGN;
		__entry->state = state;
		__entry->last = last;
	),
	TP_printk("nvme%d cntlid=%u qid=%u cid=%u tag=%u state=%u last=%u",
		  __entry->ctrl_id, __entry->cntlid, __entry->qid, __entry->cid,
		  __entry->tag, __entry->state, __entry->last)
);

/* try_send / done_send_req: send state machine entered / request fully sent */
DECLARE_EVENT_CLASS(nvme_tcp_state_class,
	TP_PROTO(struct nvme_ctrl *ctrl, u16 qid, u16 cid, u16 tag, u8 state),
	TP_ARGS(ctrl, qid, cid, tag, state),
	TP_STRUCT__entry(
		__field(int, ctrl_id)
		__field(u16, cntlid)
		__field(u16, qid)
		__field(u16, cid)
		__field(u16, tag)
		__field(u8, state)
	),
	TP_fast_assign(
		NVME_TCP_TRACE_ID_ASSIGN;
		__entry->state = state;
	),
	TP_printk("nvme%d cntlid=%u qid=%u cid=%u tag=%u state=%u",
		  __entry->ctrl_id, __entry->cntlid, __entry->qid, __entry->cid,
		  __entry->tag, __entry->state)
);

DEFINE_EVENT(nvme_tcp_state_class, nvme_tcp_try_send,
	TP_PROTO(struct nvme_ctrl *ctrl, u16 qid, u16 cid, u16 tag, u8 state),
	TP_ARGS(ctrl, qid, cid, tag, state));

DEFINE_EVENT(nvme_tcp_state_class, nvme_tcp_done_send_req,
	TP_PROTO(struct nvme_ctrl *ctrl, u16 qid, u16 cid, u16 tag, u8 state),
	TP_ARGS(ctrl, qid, cid, tag, state));

/*
 * try_send_cmd_pdu / try_send_data_pdu: a PDU header is about to be handed
 * to the socket.  len = bytes handed now, offset = bytes of this PDU
 * already sent (non-zero on a resumed partial send); data_offset/data_len =
 * the data the PDU carries (in-capsule data for a command, the H2C range
 * for an H2CData PDU).
 */
DECLARE_EVENT_CLASS(nvme_tcp_send_pdu_class,
	TP_PROTO(struct nvme_ctrl *ctrl, u16 qid, u16 cid, u16 tag,
		 u32 len, u32 offset, u32 data_offset, u32 data_len),
	TP_ARGS(ctrl, qid, cid, tag, len, offset, data_offset, data_len),
	TP_STRUCT__entry(
		__field(int, ctrl_id)
		__field(u16, cntlid)
		__field(u16, qid)
		__field(u16, cid)
		__field(u16, tag)
		__field(u32, len)
		__field(u32, offset)
		__field(u32, data_offset)
		__field(u32, data_len)
	),
	TP_fast_assign(
		NVME_TCP_TRACE_ID_ASSIGN;
		__entry->len = len;
		__entry->offset = offset;
		__entry->data_offset = data_offset;
		__entry->data_len = data_len;
	),
	TP_printk("nvme%d cntlid=%u qid=%u cid=%u tag=%u len=%u offset=%u data_offset=%u data_len=%u",
		  __entry->ctrl_id, __entry->cntlid, __entry->qid, __entry->cid,
		  __entry->tag, __entry->len, __entry->offset,
		  __entry->data_offset, __entry->data_len)
);

DEFINE_EVENT(nvme_tcp_send_pdu_class, nvme_tcp_try_send_cmd_pdu,
	TP_PROTO(struct nvme_ctrl *ctrl, u16 qid, u16 cid, u16 tag,
		 u32 len, u32 offset, u32 data_offset, u32 data_len),
	TP_ARGS(ctrl, qid, cid, tag, len, offset, data_offset, data_len));

DEFINE_EVENT(nvme_tcp_send_pdu_class, nvme_tcp_try_send_data_pdu,
	TP_PROTO(struct nvme_ctrl *ctrl, u16 qid, u16 cid, u16 tag,
		 u32 len, u32 offset, u32 data_offset, u32 data_len),
	TP_ARGS(ctrl, qid, cid, tag, len, offset, data_offset, data_len));

/* try_send_data: the socket accepted the last data byte of a PDU; len = data bytes of that PDU */
TRACE_EVENT(nvme_tcp_try_send_data,
	TP_PROTO(struct nvme_ctrl *ctrl, u16 qid, u16 cid, u16 tag, u32 len),
	TP_ARGS(ctrl, qid, cid, tag, len),
	TP_STRUCT__entry(
		__field(int, ctrl_id)
		__field(u16, cntlid)
		__field(u16, qid)
		__field(u16, cid)
		__field(u16, tag)
		__field(u32, len)
	),
	TP_fast_assign(
		NVME_TCP_TRACE_ID_ASSIGN;
		__entry->len = len;
	),
	TP_printk("nvme%d cntlid=%u qid=%u cid=%u tag=%u len=%u",
		  __entry->ctrl_id, __entry->cntlid, __entry->qid, __entry->cid,
		  __entry->tag, __entry->len)
);

/*
 * handle_r2t / handle_c2h_data: an R2T / C2HData PDU header was parsed;
 * recv_data: the last data byte of a C2HData PDU was copied.
 * data_offset/data_len = the range the PDU covers; flags = PDU header flags
 * (C2H: 0x04 LAST_PDU, 0x08 SUCCESS); recv_time = receive time of the skb
 * holding the (end of the) header / the last data byte.
 */
DECLARE_EVENT_CLASS(nvme_tcp_rx_class,
	TP_PROTO(struct nvme_ctrl *ctrl, u16 qid, u16 cid, u16 tag,
		 u32 data_offset, u32 data_len, u8 flags, s64 recv_time),
	TP_ARGS(ctrl, qid, cid, tag, data_offset, data_len, flags, recv_time),
	TP_STRUCT__entry(
		__field(u64, recv_time)
		__field(int, ctrl_id)
		__field(u16, cntlid)
		__field(u16, qid)
		__field(u16, cid)
		__field(u16, tag)
		__field(u32, data_offset)
		__field(u32, data_len)
		__field(u8, flags)
	),
	TP_fast_assign(
		NVME_TCP_TRACE_ID_ASSIGN;
		__entry->recv_time = nvme_tcp_trace_mono(recv_time);
		__entry->data_offset = data_offset;
		__entry->data_len = data_len;
		__entry->flags = flags;
	),
	TP_printk("nvme%d cntlid=%u qid=%u cid=%u tag=%u data_offset=%u data_len=%u flags=%#x recv_time=%llu",
		  __entry->ctrl_id, __entry->cntlid, __entry->qid, __entry->cid,
		  __entry->tag, __entry->data_offset, __entry->data_len,
		  __entry->flags, __entry->recv_time)
);

DEFINE_EVENT(nvme_tcp_rx_class, nvme_tcp_handle_r2t,
	TP_PROTO(struct nvme_ctrl *ctrl, u16 qid, u16 cid, u16 tag,
		 u32 data_offset, u32 data_len, u8 flags, s64 recv_time),
	TP_ARGS(ctrl, qid, cid, tag, data_offset, data_len, flags, recv_time));

DEFINE_EVENT(nvme_tcp_rx_class, nvme_tcp_handle_c2h_data,
	TP_PROTO(struct nvme_ctrl *ctrl, u16 qid, u16 cid, u16 tag,
		 u32 data_offset, u32 data_len, u8 flags, s64 recv_time),
	TP_ARGS(ctrl, qid, cid, tag, data_offset, data_len, flags, recv_time));

DEFINE_EVENT(nvme_tcp_rx_class, nvme_tcp_recv_data,
	TP_PROTO(struct nvme_ctrl *ctrl, u16 qid, u16 cid, u16 tag,
		 u32 data_offset, u32 data_len, u8 flags, s64 recv_time),
	TP_ARGS(ctrl, qid, cid, tag, data_offset, data_len, flags, recv_time));

/* process_nvme_cqe: a response capsule for an I/O or admin request was parsed (before completion) */
TRACE_EVENT(nvme_tcp_process_nvme_cqe,
	TP_PROTO(struct nvme_ctrl *ctrl, u16 qid, u16 cid, u16 tag,
		 u16 status, s64 recv_time),
	TP_ARGS(ctrl, qid, cid, tag, status, recv_time),
	TP_STRUCT__entry(
		__field(u64, recv_time)
		__field(int, ctrl_id)
		__field(u16, cntlid)
		__field(u16, qid)
		__field(u16, cid)
		__field(u16, tag)
		__field(u16, status)
	),
	TP_fast_assign(
		NVME_TCP_TRACE_ID_ASSIGN;
		__entry->recv_time = nvme_tcp_trace_mono(recv_time);
		__entry->status = status;
	),
	TP_printk("nvme%d cntlid=%u qid=%u cid=%u tag=%u status=%#x recv_time=%llu",
		  __entry->ctrl_id, __entry->cntlid, __entry->qid, __entry->cid,
		  __entry->tag, __entry->status, __entry->recv_time)
);

#endif /* _TRACE_NVME_TCP_H */

/* This part must be outside protection */
#include <trace/define_trace.h>
