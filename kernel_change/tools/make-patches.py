#!/usr/bin/env python3
"""Regenerate kernel_change/patches/<ver>/ from a pristine Debian source tree.

Usage: make-patches.py <ver> <pristine-tree> <outdir>

The tree must be a git repository whose HEAD is the pristine source of the
three touched files (see README "Regenerating the series").  Every edit below
is an exact-text anchor that must occur exactly once; a missing anchor is an
error that names the edit, so porting to a new kernel starts here.
"""
import os
import subprocess
import sys

HOST = "drivers/nvme/host/tcp.c"
TGT = "drivers/nvme/target/tcp.c"
BLK = "block/blk-core.c"

HOST_EVENTS = ["queue_rq", "queue_request", "try_send", "try_send_cmd_pdu",
               "try_send_data_pdu", "try_send_data", "done_send_req",
               "handle_r2t", "handle_c2h_data", "recv_data",
               "process_nvme_cqe"]
TGT_EVENTS = ["done_recv_pdu", "exec_read_req", "exec_write_req",
              "queue_response", "setup_c2h_data_pdu", "setup_r2t_pdu",
              "setup_response_pdu", "try_send_data_pdu", "try_send_r2t",
              "try_send_response", "try_send_data", "handle_h2c_data_pdu",
              "try_recv_data"]

ID = "&queue->ctrl->ctrl, nvme_tcp_queue_id(queue)"
SND = ID + ",\n\t\t\tqueue->snd_cid, queue->snd_tag"


def host_edits(ver):
    e = []
    exports = "".join("EXPORT_TRACEPOINT_SYMBOL_GPL(nvme_tcp_%s);\n" % n
                      for n in HOST_EVENTS)
    e.append(("include", '#include "fabrics.h"\n',
              '#include "fabrics.h"\n\n'
              "/* ntprof-perf tracepoints, see include/trace/events/nvme_tcp.h */\n"
              "#define CREATE_TRACE_POINTS\n"
              "#include <trace/events/nvme_tcp.h>\n\n" + exports))
    e.append(("queue fields", "struct nvme_tcp_queue {\n\tstruct socket\t\t*sock;\n",
              "struct nvme_tcp_queue {\n\tstruct socket\t\t*sock;\n"
              "\t/* ntprof: rx timestamp (CLOCK_REALTIME ns, 0 = none) of the skb being parsed */\n"
              "\ts64\t\t\trecv_time;\n"
              "\t/* ntprof: wire cid and tag of queue->request, taken before it is sent */\n"
              "\tu16\t\t\tsnd_cid;\n"
              "\tu16\t\t\tsnd_tag;\n"))
    e.append(("helpers",
              "static inline struct page *nvme_tcp_req_cur_page(struct nvme_tcp_request *req)\n",
              "/* ntprof: wire command_id and blk-mq tag of a request (0xffff: async event) */\n"
              "static inline u16 nvme_tcp_trace_cid(struct nvme_tcp_request *req)\n"
              "{\n"
              "\tif (nvme_tcp_async_req(req))\n"
              "\t\treturn ((struct nvme_tcp_cmd_pdu *)req->pdu)->cmd.common.command_id;\n"
              "\treturn nvme_cid(blk_mq_rq_from_pdu(req));\n"
              "}\n\n"
              "static inline u16 nvme_tcp_trace_tag(struct nvme_tcp_request *req)\n"
              "{\n"
              "\treturn nvme_tcp_async_req(req) ? 0xffff : blk_mq_rq_from_pdu(req)->tag;\n"
              "}\n\n"
              "static inline struct page *nvme_tcp_req_cur_page(struct nvme_tcp_request *req)\n"))
    qr_sig = "\t\tbool sync, bool last)\n" if ver in ("6.1", "5.15") else "\t\tbool last)\n"
    e.append(("queue_request",
              qr_sig + "{\n\tstruct nvme_tcp_queue *queue = req->queue;\n\tbool empty;\n\n",
              qr_sig + "{\n\tstruct nvme_tcp_queue *queue = req->queue;\n\tbool empty;\n\n"
              "\ttrace_nvme_tcp_queue_request(" + ID + ",\n"
              "\t\t\tnvme_tcp_trace_cid(req), nvme_tcp_trace_tag(req),\n"
              "\t\t\treq->state, last);\n\n"))
    e.append(("process_nvme_cqe",
              "\t\tnvme_tcp_error_recovery(&queue->ctrl->ctrl);\n\t\treturn -EINVAL;\n\t}\n\n"
              "\treq = blk_mq_rq_to_pdu(rq);\n",
              "\t\tnvme_tcp_error_recovery(&queue->ctrl->ctrl);\n\t\treturn -EINVAL;\n\t}\n\n"
              "\ttrace_nvme_tcp_process_nvme_cqe(" + ID + ",\n"
              "\t\t\tcqe->command_id, rq->tag,\n"
              "\t\t\tle16_to_cpu(cqe->status) >> 1, queue->recv_time);\n\n"
              "\treq = blk_mq_rq_to_pdu(rq);\n"))
    e.append(("handle_c2h_data",
              "\tqueue->data_remaining = le32_to_cpu(pdu->data_length);\n",
              "\tqueue->data_remaining = le32_to_cpu(pdu->data_length);\n"
              "\ttrace_nvme_tcp_handle_c2h_data(" + ID + ",\n"
              "\t\t\tpdu->command_id, rq->tag, le32_to_cpu(pdu->data_offset),\n"
              "\t\t\tqueue->data_remaining, pdu->hdr.flags, queue->recv_time);\n"))
    if ver == "5.15":
        e.append(("handle_r2t",
                  "\treq = blk_mq_rq_to_pdu(rq);\n\n\tret = nvme_tcp_setup_h2c_data_pdu(req, pdu);\n",
                  "\ttrace_nvme_tcp_handle_r2t(" + ID + ",\n"
                  "\t\t\tpdu->command_id, rq->tag, le32_to_cpu(pdu->r2t_offset),\n"
                  "\t\t\tle32_to_cpu(pdu->r2t_length), pdu->hdr.flags,\n"
                  "\t\t\tqueue->recv_time);\n"
                  "\treq = blk_mq_rq_to_pdu(rq);\n\n\tret = nvme_tcp_setup_h2c_data_pdu(req, pdu);\n"))
    else:
      e.append(("handle_r2t",
              "\treq->pdu_len = 0;\n\treq->h2cdata_left = r2t_length;\n",
              "\ttrace_nvme_tcp_handle_r2t(" + ID + ",\n"
              "\t\t\tpdu->command_id, rq->tag, r2t_offset, r2t_length,\n"
              "\t\t\tpdu->hdr.flags, queue->recv_time);\n\n"
              "\treq->pdu_len = 0;\n\treq->h2cdata_left = r2t_length;\n"))
    rd = ("\t\tqueue->data_remaining -= recv_len;\n\t}\n\n\tif (!queue->data_remaining) {\n"
          if ver == "5.15" else
          "\t\treq->data_recvd += recv_len;\n\t}\n\n\tif (!queue->data_remaining) {\n")
    e.append(("recv_data", rd, rd +
              "\t\ttrace_nvme_tcp_recv_data(" + ID + ",\n"
              "\t\t\t\tpdu->command_id, rq->tag,\n"
              "\t\t\t\tle32_to_cpu(pdu->data_offset),\n"
              "\t\t\t\tle32_to_cpu(pdu->data_length), pdu->hdr.flags,\n"
              "\t\t\t\tqueue->recv_time);\n"))
    e.append(("recv_skb",
              "\tstruct nvme_tcp_queue *queue = desc->arg.data;\n\tsize_t consumed = len;\n\tint result;\n\n",
              "\tstruct nvme_tcp_queue *queue = desc->arg.data;\n\tsize_t consumed = len;\n\tint result;\n\n"
              "\t/* ntprof: software rx timestamp (SOCK_TIMESTAMP), CLOCK_REALTIME */\n"
              "\tqueue->recv_time = ktime_to_ns(skb->tstamp);\n\n"))
    e.append(("done_send_req",
              "static inline void nvme_tcp_done_send_req(struct nvme_tcp_queue *queue)\n{\n",
              "static inline void nvme_tcp_done_send_req(struct nvme_tcp_queue *queue)\n{\n"
              "\ttrace_nvme_tcp_done_send_req(" + SND + ",\n"
              "\t\t\tqueue->request ? queue->request->state : 0);\n"))
    e.append(("try_send_data",
              "\t\t/* fully successful last send in current PDU */\n\t\tif (last && ret == len) {\n",
              "\t\t/* fully successful last send in current PDU */\n\t\tif (last && ret == len) {\n"
              "\t\t\ttrace_nvme_tcp_try_send_data(" + SND + ",\n"
              "\t\t\t\t\treq->pdu_len);\n"))
    if ver in ("6.1", "5.15"):
        e.append(("try_send_cmd_pdu",
                  "\t\tnvme_tcp_hdgst(queue->snd_hash, pdu, sizeof(*pdu));\n\n"
                  "\tret = kernel_sendpage(queue->sock, virt_to_page(pdu),\n"
                  "\t\t\toffset_in_page(pdu) + req->offset, len,  flags);\n",
                  "\t\tnvme_tcp_hdgst(queue->snd_hash, pdu, sizeof(*pdu));\n\n"
                  "\ttrace_nvme_tcp_try_send_cmd_pdu(" + SND + ",\n"
                  "\t\t\tlen, req->offset, 0, inline_data ? req->pdu_len : 0);\n"
                  "\tret = kernel_sendpage(queue->sock, virt_to_page(pdu),\n"
                  "\t\t\toffset_in_page(pdu) + req->offset, len,  flags);\n"))
        e.append(("try_send_data_pdu",
                  "\t\tnvme_tcp_hdgst(queue->snd_hash, pdu, sizeof(*pdu));\n\n" +
                  ("\tret = kernel_sendpage(" if ver == "5.15" else
                   "\tif (!req->h2cdata_left)\n\t\tret = kernel_sendpage("),
                  "\t\tnvme_tcp_hdgst(queue->snd_hash, pdu, sizeof(*pdu));\n\n"
                  "\ttrace_nvme_tcp_try_send_data_pdu(" + SND + ",\n"
                  "\t\t\tlen, req->offset, le32_to_cpu(pdu->data_offset),\n"
                  "\t\t\tle32_to_cpu(pdu->data_length));\n"
                  + ("\tret = kernel_sendpage(" if ver == "5.15" else
                     "\tif (!req->h2cdata_left)\n\t\tret = kernel_sendpage(")))
    else:
        e.append(("try_send_cmd_pdu",
                  "\t\tnvme_tcp_hdgst(queue->snd_hash, pdu, sizeof(*pdu));\n\n"
                  "\tbvec_set_virt(&bvec, (void *)pdu + req->offset, len);\n",
                  "\t\tnvme_tcp_hdgst(queue->snd_hash, pdu, sizeof(*pdu));\n\n"
                  "\ttrace_nvme_tcp_try_send_cmd_pdu(" + SND + ",\n"
                  "\t\t\tlen, req->offset, 0, inline_data ? req->pdu_len : 0);\n"
                  "\tbvec_set_virt(&bvec, (void *)pdu + req->offset, len);\n"))
        e.append(("try_send_data_pdu",
                  "\tif (!req->h2cdata_left)\n\t\tmsg.msg_flags |= MSG_SPLICE_PAGES;\n\n",
                  "\tif (!req->h2cdata_left)\n\t\tmsg.msg_flags |= MSG_SPLICE_PAGES;\n\n"
                  "\ttrace_nvme_tcp_try_send_data_pdu(" + SND + ",\n"
                  "\t\t\tlen, req->offset, le32_to_cpu(pdu->data_offset),\n"
                  "\t\t\tle32_to_cpu(pdu->data_length));\n"))
    ts_next = ("\tif (req->state == NVME_TCP_SEND_CMD_PDU) {\n" if ver == "5.15"
               else "\tnoreclaim_flag = memalloc_noreclaim_save();\n")
    e.append(("try_send",
              "\treq = queue->request;\n\n" + ts_next,
              "\treq = queue->request;\n\n"
              "\tqueue->snd_cid = nvme_tcp_trace_cid(req);\n"
              "\tqueue->snd_tag = nvme_tcp_trace_tag(req);\n"
              "\ttrace_nvme_tcp_try_send(" + SND + ", req->state);\n\n"
              + ts_next))
    start = "\tblk_mq_start_request(rq);\n" if ver == "5.15" else "\tnvme_start_request(rq);\n"
    disk = "rq->rq_disk" if ver == "5.15" else "rq->q->disk"
    e.append(("queue_rq", start + "\n",
              start + "\n"
              "\ttrace_nvme_tcp_queue_rq(" + ID + ",\n"
              "\t\t\tnvme_req(rq)->cmd->common.command_id, rq->tag, rq,\n"
              "\t\t\t" + disk + ", nvme_req(rq)->cmd,\n"
              "\t\t\tnvme_tcp_has_inline_data(req));\n\n"))
    e.append(("enable timestamps",
              "\t/* Set TCP no delay */\n\ttcp_sock_set_nodelay(queue->sock->sk);\n",
              "\t/* Set TCP no delay */\n\ttcp_sock_set_nodelay(queue->sock->sk);\n\n"
              "\t/* ntprof: software rx timestamps on skbs (queue->recv_time) */\n"
              "\tsock_enable_timestamps(queue->sock->sk);\n"))
    return e


TS_HELPERS = (
    "/*\n"
    " * ntprof: software rx timestamp of the last skb a recvmsg() consumed.  The\n"
    " * socket has SOCK_RCVTSTAMP|SOCK_RCVTSTAMPNS (sock_enable_timestamps()), so\n"
    " * tcp_recvmsg() puts an SO_TIMESTAMPNS_OLD cmsg (CLOCK_REALTIME) into the\n"
    " * kernel buffer given here.  Returns ns, 0 when there was none.\n"
    " */\n"
    "#define NVMET_TCP_TS_CBUF_LEN CMSG_SPACE(sizeof(struct __kernel_old_timespec))\n\n"
    "static inline void nvmet_tcp_ts_prep(struct msghdr *msg, void *cbuf)\n"
    "{\n"
    "\tmsg->msg_control = cbuf;\n"
    "\tmsg->msg_controllen = NVMET_TCP_TS_CBUF_LEN;\n"
    "}\n\n"
    "static inline s64 nvmet_tcp_ts_get(struct msghdr *msg, void *cbuf)\n"
    "{\n"
    "\tstruct cmsghdr *cmsg = cbuf;\n"
    "\tstruct __kernel_old_timespec ts;\n"
    "\ts64 t = 0;\n\n"
    "\tif (msg->msg_controllen < NVMET_TCP_TS_CBUF_LEN &&\n"
    "\t    cmsg->cmsg_level == SOL_SOCKET &&\n"
    "\t    cmsg->cmsg_type == SO_TIMESTAMPNS_OLD &&\n"
    "\t    cmsg->cmsg_len >= CMSG_LEN(sizeof(ts))) {\n"
    "\t\tmemcpy(&ts, CMSG_DATA(cmsg), sizeof(ts));\n"
    "\t\tt = (s64)ts.tv_sec * NSEC_PER_SEC + ts.tv_nsec;\n"
    "\t}\n"
    "\tmsg->msg_control = NULL;\n"
    "\tmsg->msg_controllen = 0;\n"
    "\treturn t;\n"
    "}\n\n")

TSQ = "&queue->nvme_sq"
CSQ = "&cmd->queue->nvme_sq"


def target_edits(ver):
    e = []
    tls = ver == "6.12"
    exports = "".join("EXPORT_TRACEPOINT_SYMBOL_GPL(nvmet_tcp_%s);\n" % n
                      for n in TGT_EVENTS)
    e.append(("include", '#include "nvmet.h"\n',
              '#include "nvmet.h"\n\n'
              "/* ntprof-perf tracepoints, see include/trace/events/nvmet_tcp.h */\n"
              "#define CREATE_TRACE_POINTS\n"
              "#include <trace/events/nvmet_tcp.h>\n\n" + exports))
    e.append(("queue field",
              "struct nvmet_tcp_queue {\n\tstruct socket\t\t*sock;\n",
              "struct nvmet_tcp_queue {\n\tstruct socket\t\t*sock;\n"
              "\t/* ntprof: rx timestamp (CLOCK_REALTIME ns, 0 = none) of the current PDU */\n"
              "\ts64\t\t\trecv_time;\n"))
    e.append(("ts helpers", "static void nvmet_setup_c2h_data_pdu(struct nvmet_tcp_cmd *cmd)\n{\n",
              TS_HELPERS +
              "static void nvmet_setup_c2h_data_pdu(struct nvmet_tcp_cmd *cmd)\n{\n"))
    e.append(("setup_c2h_data_pdu",
              "\tcmd->offset = 0;\n\tcmd->state = NVMET_TCP_SEND_DATA_PDU;\n",
              "\ttrace_nvmet_tcp_setup_c2h_data_pdu(" + TSQ + ", cmd->req.cmd,\n"
              "\t\t\tcmd->wbytes_done, cmd->req.transfer_len);\n\n"
              "\tcmd->offset = 0;\n\tcmd->state = NVMET_TCP_SEND_DATA_PDU;\n"))
    e.append(("setup_r2t_pdu",
              "\tcmd->offset = 0;\n\tcmd->state = NVMET_TCP_SEND_R2T;\n",
              "\ttrace_nvmet_tcp_setup_r2t_pdu(" + TSQ + ", cmd->req.cmd,\n"
              "\t\t\tcmd->rbytes_done,\n"
              "\t\t\tcmd->req.transfer_len - cmd->rbytes_done);\n\n"
              "\tcmd->offset = 0;\n\tcmd->state = NVMET_TCP_SEND_R2T;\n"))
    e.append(("setup_response_pdu",
              "\tcmd->offset = 0;\n\tcmd->state = NVMET_TCP_SEND_RESPONSE;\n",
              "\ttrace_nvmet_tcp_setup_response_pdu(" + TSQ + ", cmd->req.cmd,\n"
              "\t\t\tle16_to_cpu(cmd->req.cqe->status) >> 1);\n\n"
              "\tcmd->offset = 0;\n\tcmd->state = NVMET_TCP_SEND_RESPONSE;\n"))
    e.append(("queue_response",
              "\t\t\treturn;\n\t}\n\n\tllist_add(&cmd->lentry, &queue->resp_list);\n",
              "\t\t\treturn;\n\t}\n\n"
              "\ttrace_nvmet_tcp_queue_response(" + TSQ + ", cmd->req.cmd,\n"
              "\t\t\tle16_to_cpu(cmd->req.cqe->status) >> 1,\n"
              "\t\t\tcmd->req.transfer_len, nvmet_tcp_need_data_in(cmd));\n\n"
              "\tllist_add(&cmd->lentry, &queue->resp_list);\n"))
    e.append(("exec_write_req",
              "\tif (unlikely(cmd->flags & NVMET_TCP_F_INIT_FAILED))\n"
              "\t\tnvmet_tcp_queue_response(&cmd->req);\n\telse\n\t\tcmd->req.execute(&cmd->req);\n}\n",
              "\tif (unlikely(cmd->flags & NVMET_TCP_F_INIT_FAILED)) {\n"
              "\t\tnvmet_tcp_queue_response(&cmd->req);\n\t} else {\n"
              "\t\ttrace_nvmet_tcp_exec_write_req(" + CSQ + ", cmd->req.cmd,\n"
              "\t\t\t\tcmd->req.transfer_len);\n"
              "\t\tcmd->req.execute(&cmd->req);\n\t}\n}\n"))
    # send side
    if ver in ("6.1", "5.15"):
        dp_anchor = "\tret = kernel_sendpage(cmd->queue->sock, virt_to_page(cmd->data_pdu),\n"
        rsp_anchor = "\tret = kernel_sendpage(cmd->queue->sock, virt_to_page(cmd->rsp_pdu),\n"
        r2t_anchor = "\tret = kernel_sendpage(cmd->queue->sock, virt_to_page(cmd->r2t_pdu),\n"
    else:
        dp_anchor = ("\tbvec_set_virt(&bvec, (void *)cmd->data_pdu + cmd->offset, left);\n")
        rsp_anchor = ("\tbvec_set_virt(&bvec, (void *)cmd->rsp_pdu + cmd->offset, left);\n")
        r2t_anchor = ("\tbvec_set_virt(&bvec, (void *)cmd->r2t_pdu + cmd->offset, left);\n")
    for name, anchor in (("try_send_data_pdu", dp_anchor),
                         ("try_send_response", rsp_anchor),
                         ("try_send_r2t", r2t_anchor)):
        e.append((name, anchor,
                  "\ttrace_nvmet_tcp_%s(%s, cmd->req.cmd, left);\n" % (name, CSQ)
                  + anchor))
    e.append(("try_send_data",
              "\t\t\tcmd->offset = 0;\n\t\t}\n\t}\n\n\tif (queue->data_digest) {\n",
              "\t\t\tcmd->offset = 0;\n\t\t}\n\t}\n\n"
              "\ttrace_nvmet_tcp_try_send_data(" + TSQ + ", cmd->req.cmd,\n"
              "\t\t\tcmd->wbytes_done);\n\n"
              "\tif (queue->data_digest) {\n"))
    # receive side
    h2c = ("\t\tnvmet_tcp_fatal_error(queue);\n\t\treturn -EPROTO;\n\t}\n\tcmd->pdu_recv = 0;\n"
           if ver == "5.15" else
           "\t\tpr_err(\"H2CData PDU len %u is invalid\\n\", cmd->pdu_len);\n\t\tgoto err_proto;\n\t}\n")
    e.append(("handle_h2c_data_pdu", h2c,
              (h2c[:-len("\tcmd->pdu_recv = 0;\n")] if ver == "5.15" else h2c) +
              "\ttrace_nvmet_tcp_handle_h2c_data_pdu(" + TSQ + ", cmd->req.cmd,\n"
              "\t\t\tle32_to_cpu(data->data_offset), cmd->pdu_len,\n"
              "\t\t\tqueue->recv_time);\n" +
              ("\tcmd->pdu_recv = 0;\n" if ver == "5.15" else "")))
    e.append(("done_recv_pdu",
              "\treq = &queue->cmd->req;\n\tmemcpy(req->cmd, nvme_cmd, sizeof(*nvme_cmd));\n",
              "\treq = &queue->cmd->req;\n\tmemcpy(req->cmd, nvme_cmd, sizeof(*nvme_cmd));\n"
              "\ttrace_nvmet_tcp_done_recv_pdu(" + TSQ + ", req->cmd, queue->recv_time);\n"))
    e.append(("exec_read_req",
              "\tqueue->cmd->req.execute(&queue->cmd->req);\nout:\n",
              "\ttrace_nvmet_tcp_exec_read_req(" + TSQ + ", req->cmd, req->transfer_len);\n"
              "\tqueue->cmd->req.execute(&queue->cmd->req);\nout:\n"))
    if tls:
        e.append(("try_recv_pdu decl",
                  "\tchar cbuf[CMSG_LEN(sizeof(char))] = {};\n\tstruct msghdr msg = { .msg_flags = MSG_DONTWAIT };\n\nrecv:\n",
                  "\tchar cbuf[CMSG_LEN(sizeof(char))] = {};\n\tstruct msghdr msg = { .msg_flags = MSG_DONTWAIT };\n"
                  "\tchar tsbuf[NVMET_TCP_TS_CBUF_LEN];\n\ts64 rx_time = 0;\n\nrecv:\n"))
        e.append(("try_recv_pdu recv",
                  "\tiov.iov_len = queue->left;\n"
                  "\tif (queue->tls_pskid) {\n\t\tmsg.msg_control = cbuf;\n\t\tmsg.msg_controllen = sizeof(cbuf);\n\t}\n"
                  "\tlen = kernel_recvmsg(queue->sock, &msg, &iov, 1,\n\t\t\tiov.iov_len, msg.msg_flags);\n"
                  "\tif (unlikely(len < 0))\n\t\treturn len;\n",
                  "\tiov.iov_len = queue->left;\n"
                  "\tif (queue->tls_pskid) {\n\t\tmsg.msg_control = cbuf;\n\t\tmsg.msg_controllen = sizeof(cbuf);\n\t} else {\n"
                  "\t\tnvmet_tcp_ts_prep(&msg, tsbuf);\n\t}\n"
                  "\tlen = kernel_recvmsg(queue->sock, &msg, &iov, 1,\n\t\t\tiov.iov_len, msg.msg_flags);\n"
                  "\tif (!queue->tls_pskid)\n\t\trx_time = nvmet_tcp_ts_get(&msg, tsbuf);\n"
                  "\tif (unlikely(len < 0))\n\t\treturn len;\n"))
        e.append(("try_recv_pdu time",
                  "\tqueue->offset += len;\n\tqueue->left -= len;\n\tif (queue->left)\n\t\treturn -EAGAIN;\n\n"
                  "\tif (queue->offset == sizeof(struct nvme_tcp_hdr)) {\n",
                  "\tif (queue->offset == 0)\n\t\tqueue->recv_time = rx_time;\n"
                  "\tqueue->offset += len;\n\tqueue->left -= len;\n\tif (queue->left)\n\t\treturn -EAGAIN;\n\n"
                  "\tif (queue->offset == sizeof(struct nvme_tcp_hdr)) {\n"))
        e.append(("try_recv_data",
                  "\tint len, ret;\n\n\twhile (msg_data_left(&cmd->recv_msg)) {\n"
                  "\t\tlen = sock_recvmsg(cmd->queue->sock, &cmd->recv_msg,\n"
                  "\t\t\tcmd->recv_msg.msg_flags);\n\t\tif (len <= 0)\n\t\t\treturn len;\n",
                  "\tint len, ret;\n\tchar tsbuf[NVMET_TCP_TS_CBUF_LEN];\n\ts64 rx_time = 0;\n\n"
                  "\twhile (msg_data_left(&cmd->recv_msg)) {\n"
                  "\t\tif (!queue->tls_pskid)\n\t\t\tnvmet_tcp_ts_prep(&cmd->recv_msg, tsbuf);\n"
                  "\t\tlen = sock_recvmsg(cmd->queue->sock, &cmd->recv_msg,\n"
                  "\t\t\tcmd->recv_msg.msg_flags);\n"
                  "\t\tif (!queue->tls_pskid)\n\t\t\trx_time = nvmet_tcp_ts_get(&cmd->recv_msg, tsbuf);\n"
                  "\t\tif (len <= 0)\n\t\t\treturn len;\n"))
    else:
        e.append(("try_recv_pdu decl",
                  "\tstruct msghdr msg = { .msg_flags = MSG_DONTWAIT };\n\nrecv:\n",
                  "\tstruct msghdr msg = { .msg_flags = MSG_DONTWAIT };\n"
                  "\tchar tsbuf[NVMET_TCP_TS_CBUF_LEN];\n\ts64 rx_time;\n\nrecv:\n"))
        e.append(("try_recv_pdu recv",
                  "\tlen = kernel_recvmsg(queue->sock, &msg, &iov, 1,\n\t\t\tiov.iov_len, msg.msg_flags);\n"
                  "\tif (unlikely(len < 0))\n\t\treturn len;\n\n\tqueue->offset += len;\n",
                  "\tnvmet_tcp_ts_prep(&msg, tsbuf);\n"
                  "\tlen = kernel_recvmsg(queue->sock, &msg, &iov, 1,\n\t\t\tiov.iov_len, msg.msg_flags);\n"
                  "\trx_time = nvmet_tcp_ts_get(&msg, tsbuf);\n"
                  "\tif (unlikely(len < 0))\n\t\treturn len;\n\n"
                  "\tif (queue->offset == 0)\n\t\tqueue->recv_time = rx_time;\n"
                  "\tqueue->offset += len;\n"))
        e.append(("try_recv_data",
                  "\tint ret;\n\n\twhile (msg_data_left(&cmd->recv_msg)) {\n"
                  "\t\tret = sock_recvmsg(cmd->queue->sock, &cmd->recv_msg,\n"
                  "\t\t\tcmd->recv_msg.msg_flags);\n",
                  "\tint ret;\n\tchar tsbuf[NVMET_TCP_TS_CBUF_LEN];\n\ts64 rx_time = 0;\n\n"
                  "\twhile (msg_data_left(&cmd->recv_msg)) {\n"
                  "\t\tnvmet_tcp_ts_prep(&cmd->recv_msg, tsbuf);\n"
                  "\t\tret = sock_recvmsg(cmd->queue->sock, &cmd->recv_msg,\n"
                  "\t\t\tcmd->recv_msg.msg_flags);\n"
                  "\t\trx_time = nvmet_tcp_ts_get(&cmd->recv_msg, tsbuf);\n"))
    e.append(("try_recv_data trace",
              "\t\tcmd->rbytes_done += len;\n\t}\n\n" if tls else
              "\t\tcmd->rbytes_done += ret;\n\t}\n\n",
              ("\t\tcmd->rbytes_done += len;\n\t}\n\n" if tls else
               "\t\tcmd->rbytes_done += ret;\n\t}\n\n") +
              "\ttrace_nvmet_tcp_try_recv_data(" + TSQ + ", cmd->req.cmd,\n"
              "\t\t\tcmd->rbytes_done - cmd->pdu_len, cmd->pdu_len, rx_time);\n\n"))
    if tls:
        e.append(("enable timestamps",
                  "static int nvmet_tcp_set_queue_sock(struct nvmet_tcp_queue *queue)\n{\n"
                  "\tstruct socket *sock = queue->sock;\n\tstruct inet_sock *inet = inet_sk(sock->sk);\n\tint ret;\n\n",
                  "static int nvmet_tcp_set_queue_sock(struct nvmet_tcp_queue *queue)\n{\n"
                  "\tstruct socket *sock = queue->sock;\n\tstruct inet_sock *inet = inet_sk(sock->sk);\n\tint ret;\n\n"
                  "\t/* ntprof: software rx timestamps (queue->recv_time); not with kTLS */\n"
                  "\tif (!queue->tls_pskid)\n\t\tsock_enable_timestamps(sock->sk);\n\n"))
    else:
        e.append(("enable timestamps",
                  "static int nvmet_tcp_set_queue_sock(struct nvmet_tcp_queue *queue)\n{\n"
                  "\tstruct socket *sock = queue->sock;\n\tstruct inet_sock *inet = inet_sk(sock->sk);\n\tint ret;\n\n",
                  "static int nvmet_tcp_set_queue_sock(struct nvmet_tcp_queue *queue)\n{\n"
                  "\tstruct socket *sock = queue->sock;\n\tstruct inet_sock *inet = inet_sk(sock->sk);\n\tint ret;\n\n"
                  "\t/* ntprof: software rx timestamps (queue->recv_time) */\n"
                  "\tsock_enable_timestamps(sock->sk);\n\n"))
    return e


def blk_edits(ver):
    a = "EXPORT_TRACEPOINT_SYMBOL_GPL(block_rq_insert);\n"
    return [("export block_rq_complete", a,
             a + "EXPORT_TRACEPOINT_SYMBOL_GPL(block_rq_complete);\n")]


def apply(tree, path, edits):
    fn = os.path.join(tree, path)
    s = open(fn).read()
    for name, old, new in edits:
        n = s.count(old)
        if n != 1:
            sys.exit("%s: edit '%s': anchor found %d times" % (path, name, n))
        s = s.replace(old, new)
    open(fn, "w").write(s)


def git(tree, *args, **kw):
    return subprocess.run(["git", "-C", tree] + list(args), check=True,
                          stdout=subprocess.PIPE, text=True, **kw).stdout


def main():
    ver, tree, out = sys.argv[1:4]
    git(tree, "checkout", "-q", "--", HOST, TGT, BLK)
    series = [
        ("0001-block-export-block_rq_complete-tracepoint.patch", BLK, blk_edits),
        ("0002-nvme-tcp-add-ntprof-tracepoints.patch", HOST, host_edits),
        ("0003-nvmet-tcp-add-ntprof-tracepoints.patch", TGT, target_edits),
    ]
    os.makedirs(out, exist_ok=True)
    for name, path, fn in series:
        apply(tree, path, fn(ver))
        diff = git(tree, "diff", "--", path)
        with open(os.path.join(out, name), "w") as f:
            f.write(diff)
    print("wrote %d patches to %s" % (len(series), out))


if __name__ == "__main__":
    main()
