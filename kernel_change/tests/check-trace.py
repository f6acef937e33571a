#!/usr/bin/env python3
"""Check the ftrace text written by guest-fire.sh (run on the host).

    check-trace.py OUTDIR

For each job (trace-<job>.txt) every host I/O (nvme_tcp_queue_rq on an I/O
queue) is followed from queue_rq to its completion, with the events of the same
(ctrl_id, qid, cid); target events are matched by (cntlid, qid, cid) inside the
host I/O's lifetime.  Checked per I/O:
  - nvme:nvme_setup_cmd exists for the same ctrl/qid/cid (cid incl. genctr bits),
    and nvme:nvme_complete_rq after the CQE;
  - the number of each nvme_tcp / nvmet_tcp event matches the path (read, in-capsule
    write, R2T write); target cntlid/qid equal the host's;
  - lengths: queue_rq.len, C2H/R2T/H2C data lengths, target len;
  - recv_time (CLOCK_MONOTONIC ns; trace_clock=mono so trace timestamps are the same
    clock) is non-zero and inside [queue_rq time, event time].
Exit status 0 when all I/Os pass.
"""
import collections
import os
import re
import sys

LINE = re.compile(r'^\s*(?P<task>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+(?P<ts>\d+\.\d+):\s+(?P<ev>\w+):\s?(?P<rest>.*)$')
KV = re.compile(r'(\w+)=([^\s,]+)')
TOL_NS = 2000   # trace timestamps are printed in us


def num(v):
    return int(v, 0)


def parse(path):
    evs = []
    for line in open(path, errors='replace'):
        if line.startswith('#'):
            continue
        m = LINE.match(line)
        if not m:
            continue
        kv = dict(KV.findall(m.group('rest')))
        ev = m.group('ev')
        rest = m.group('rest')
        mm = re.match(r'nvme(\d+)', rest)
        if ev.startswith('nvme_tcp_') and mm:
            kv['ctrl_id'] = mm.group(1)
        if ev in ('nvme_setup_cmd', 'nvme_complete_rq') and mm:
            kv['ctrl_id'] = mm.group(1)
        ts_ns = int(round(float(m.group('ts')) * 1e9))
        evs.append((ts_ns, ev, kv, line.rstrip()))
    evs.sort(key=lambda e: e[0])
    return evs


HOST_EXPECT = {
    # event: (min, max) per I/O; None = unbounded
    'read': {'nvme_tcp_queue_rq': (1, 1), 'nvme_tcp_queue_request': (1, 1),
             'nvme_tcp_try_send': (1, None), 'nvme_tcp_try_send_cmd_pdu': (1, None),
             'nvme_tcp_done_send_req': (1, 1), 'nvme_tcp_handle_c2h_data': (1, None),
             'nvme_tcp_recv_data': (1, None), 'nvme_tcp_process_nvme_cqe': (1, 1),
             'nvme_tcp_handle_r2t': (0, 0), 'nvme_tcp_try_send_data_pdu': (0, 0),
             'nvme_tcp_try_send_data': (0, 0)},
    'write_inline': {'nvme_tcp_queue_rq': (1, 1), 'nvme_tcp_queue_request': (1, 1),
                     'nvme_tcp_try_send': (1, None), 'nvme_tcp_try_send_cmd_pdu': (1, None),
                     'nvme_tcp_try_send_data': (1, 1), 'nvme_tcp_done_send_req': (1, 1),
                     'nvme_tcp_process_nvme_cqe': (1, 1), 'nvme_tcp_handle_r2t': (0, 0),
                     'nvme_tcp_try_send_data_pdu': (0, 0), 'nvme_tcp_handle_c2h_data': (0, 0),
                     'nvme_tcp_recv_data': (0, 0)},
    'write_r2t': {'nvme_tcp_queue_rq': (1, 1), 'nvme_tcp_queue_request': (2, None),
                  'nvme_tcp_try_send': (2, None), 'nvme_tcp_try_send_cmd_pdu': (1, None),
                  'nvme_tcp_done_send_req': (2, None), 'nvme_tcp_handle_r2t': (1, None),
                  'nvme_tcp_try_send_data_pdu': (1, None), 'nvme_tcp_try_send_data': (1, None),
                  'nvme_tcp_process_nvme_cqe': (1, 1), 'nvme_tcp_handle_c2h_data': (0, 0),
                  'nvme_tcp_recv_data': (0, 0)},
}
TGT_EXPECT = {
    'read': {'nvmet_tcp_done_recv_pdu': (1, 1), 'nvmet_tcp_exec_read_req': (1, 1),
             'nvmet_tcp_queue_response': (1, 1), 'nvmet_tcp_setup_c2h_data_pdu': (1, None),
             'nvmet_tcp_try_send_data_pdu': (1, None), 'nvmet_tcp_try_send_data': (1, None),
             'nvmet_tcp_setup_response_pdu': (1, 1), 'nvmet_tcp_try_send_response': (1, None),
             'nvmet_tcp_exec_write_req': (0, 0), 'nvmet_tcp_setup_r2t_pdu': (0, 0),
             'nvmet_tcp_try_send_r2t': (0, 0), 'nvmet_tcp_handle_h2c_data_pdu': (0, 0),
             'nvmet_tcp_try_recv_data': (0, 0)},
    'write_inline': {'nvmet_tcp_done_recv_pdu': (1, 1), 'nvmet_tcp_try_recv_data': (1, 1),
                     'nvmet_tcp_exec_write_req': (1, 1), 'nvmet_tcp_queue_response': (1, 1),
                     'nvmet_tcp_setup_response_pdu': (1, 1), 'nvmet_tcp_try_send_response': (1, None),
                     'nvmet_tcp_exec_read_req': (0, 0), 'nvmet_tcp_setup_r2t_pdu': (0, 0),
                     'nvmet_tcp_try_send_r2t': (0, 0), 'nvmet_tcp_handle_h2c_data_pdu': (0, 0),
                     'nvmet_tcp_setup_c2h_data_pdu': (0, 0)},
    'write_r2t': {'nvmet_tcp_done_recv_pdu': (1, 1), 'nvmet_tcp_queue_response': (2, 2),
                  'nvmet_tcp_setup_r2t_pdu': (1, None), 'nvmet_tcp_try_send_r2t': (1, None),
                  'nvmet_tcp_handle_h2c_data_pdu': (1, None), 'nvmet_tcp_try_recv_data': (1, None),
                  'nvmet_tcp_exec_write_req': (1, 1), 'nvmet_tcp_setup_response_pdu': (1, 1),
                  'nvmet_tcp_try_send_response': (1, None), 'nvmet_tcp_exec_read_req': (0, 0),
                  'nvmet_tcp_setup_c2h_data_pdu': (0, 0)},
}
HOST_RX = ('nvme_tcp_handle_r2t', 'nvme_tcp_handle_c2h_data', 'nvme_tcp_recv_data',
           'nvme_tcp_process_nvme_cqe')
TGT_RX = ('nvmet_tcp_done_recv_pdu', 'nvmet_tcp_handle_h2c_data_pdu', 'nvmet_tcp_try_recv_data')


def check_job(name, evs, report):
    fails = []
    ios = []
    open_io = {}
    for e in evs:
        ts, ev, kv, line = e
        if ev == 'nvme_tcp_queue_rq' and num(kv['qid']) > 0:
            key = (kv['ctrl_id'], kv['qid'], kv['cid'])
            io = {'key': key, 'start': ts, 'q': e, 'host': [], 'end': None}
            ios.append(io)
            open_io[key] = io
        if ev.startswith('nvme_tcp_'):
            key = (kv.get('ctrl_id'), kv.get('qid'), kv.get('cid'))
            io = open_io.get(key)
            if io and io['end'] is None:
                io['host'].append(e)
                if ev == 'nvme_tcp_process_nvme_cqe' or (
                        ev == 'nvme_tcp_recv_data' and num(kv['flags']) & 0x8):
                    io['end'] = ts
    setup = collections.defaultdict(list)
    complete = collections.defaultdict(list)
    tgt = collections.defaultdict(list)
    for e in evs:
        ts, ev, kv, _ = e
        if ev == 'nvme_setup_cmd':
            setup[(kv.get('ctrl_id'), kv.get('qid'), kv.get('cmdid'))].append(ts)
        elif ev == 'nvme_complete_rq':
            complete[(kv.get('ctrl_id'), kv.get('qid'), kv.get('cmdid'))].append(ts)
        elif ev.startswith('nvmet_tcp_'):
            tgt[(kv['qid'], kv['cid'])].append(e)

    counts = collections.Counter()
    host_counts = {}
    tgt_counts = {}
    rx_lat = collections.defaultdict(list)
    for io in ios:
        q = io['q'][2]
        key = io['key']
        tag = '%s qid=%s cid=%s' % key
        if io['end'] is None:
            fails.append('%s: no completion event' % tag)
            continue
        write = q['write'] == '1'
        kind = 'read' if not write else ('write_inline' if q['inline'] == '1' else 'write_r2t')
        counts[kind] += 1
        c = collections.Counter(e[1] for e in io['host'])
        for ev, (lo, hi) in HOST_EXPECT[kind].items():
            n = c.get(ev, 0)
            if n < lo or (hi is not None and n > hi):
                fails.append('%s (%s): %s fired %d times, expected %s..%s' % (tag, kind, ev, n, lo, hi))
        host_counts.setdefault(kind, collections.Counter()).update(c)
        # nvme:nvme_setup_cmd / complete_rq with the same ctrl/qid/cid
        if not any(io['start'] - 10**9 <= t <= io['start'] for t in setup.get(key, [])):
            fails.append('%s: no nvme_setup_cmd with the same ctrl/qid/cid before queue_rq' % tag)
        if any(io['end'] <= t <= io['end'] + 10**9 for t in complete.get(key, [])):
            counts['complete_rq_cid_ok'] += 1
        elif kind == 'write_r2t' and any(
                k[:2] == key[:2] and any(io['end'] <= t <= io['end'] + 10**9 for t in ts)
                for k, ts in complete.items()):
            # stock nvme:nvme_complete_rq reads command_id from the request's PDU
            # buffer, which the H2CData PDU header overwrote: it shows the ttag.
            counts['complete_rq_cid_is_ttag'] += 1
        else:
            fails.append('%s: no nvme_complete_rq with the same ctrl/qid/cid after the CQE' % tag)
        # lengths
        qlen = num(q['len'])
        for ts, ev, kv, _ in io['host']:
            if ev in ('nvme_tcp_handle_c2h_data', 'nvme_tcp_recv_data', 'nvme_tcp_handle_r2t') \
                    and num(kv['data_len']) != qlen:
                fails.append('%s: %s data_len=%s != queue_rq len %d' % (tag, ev, kv['data_len'], qlen))
            if ev == 'nvme_tcp_try_send_data' and num(kv['len']) != qlen:
                fails.append('%s: try_send_data len=%s != %d' % (tag, kv['len'], qlen))
            if kv.get('cntlid') != q['cntlid']:
                fails.append('%s: %s cntlid differs' % (tag, ev))
            if ev in HOST_RX:
                rt = num(kv['recv_time'])
                if rt == 0:
                    fails.append('%s: %s recv_time=0' % (tag, ev))
                elif not (io['start'] - TOL_NS <= rt <= ts + TOL_NS):
                    fails.append('%s: %s recv_time %d outside [queue_rq %d, event %d]' % (tag, ev, rt, io['start'], ts))
                else:
                    rx_lat[ev].append(ts - rt)
        # target side: same qid/cid inside the host I/O lifetime, cntlid equal
        tev = [e for e in tgt.get((key[1], key[2]), []) if io['start'] <= e[0] <= io['end']]
        tc = collections.Counter(e[1] for e in tev)
        for ev, (lo, hi) in TGT_EXPECT[kind].items():
            n = tc.get(ev, 0)
            if n < lo or (hi is not None and n > hi):
                fails.append('%s (%s): %s fired %d times, expected %s..%s' % (tag, kind, ev, n, lo, hi))
        tgt_counts.setdefault(kind, collections.Counter()).update(tc)
        for ts, ev, kv, _ in tev:
            if kv['cntlid'] != q['cntlid']:
                fails.append('%s: target %s cntlid=%s != host cntlid=%s' % (tag, ev, kv['cntlid'], q['cntlid']))
            if num(kv['opcode']) != num(q['opcode']):
                fails.append('%s: target %s opcode=%s != host %s' % (tag, ev, kv['opcode'], q['opcode']))
            if ev in ('nvmet_tcp_exec_read_req', 'nvmet_tcp_exec_write_req') and num(kv['len']) != qlen:
                fails.append('%s: %s len=%s != %d' % (tag, ev, kv['len'], qlen))
            if ev == 'nvmet_tcp_done_recv_pdu' and num(kv['len']) != qlen:
                fails.append('%s: done_recv_pdu len=%s != %d' % (tag, kv['len'], qlen))
            if ev == 'nvmet_tcp_queue_response':
                r2t = kv['r2t'] == '1'
                first = [e for e in tev if e[1] == ev][0][0] == ts
                if r2t != (kind == 'write_r2t' and first):
                    fails.append('%s: queue_response r2t=%s unexpected' % (tag, kv['r2t']))
            if ev in TGT_RX:
                rt = num(kv['recv_time'])
                if rt == 0:
                    fails.append('%s: %s recv_time=0' % (tag, ev))
                elif not (io['start'] - TOL_NS <= rt <= ts + TOL_NS):
                    fails.append('%s: %s recv_time %d outside [host queue_rq %d, event %d]' % (tag, ev, rt, io['start'], ts))
                else:
                    rx_lat[ev].append(ts - rt)
    report.append('== %s: %d I/Os (%s), %d failures' % (
        name, len(ios), ', '.join('%s=%d' % kv for kv in sorted(counts.items())
                                  if not kv[0].startswith('complete_rq')), len(fails)))
    report.append('  nvme:nvme_complete_rq cmdid == wire cid: %d I/Os; == H2C ttag instead (R2T writes): %d I/Os' % (
        counts['complete_rq_cid_ok'], counts['complete_rq_cid_is_ttag']))
    for kind in sorted(host_counts):
        n = counts[kind]
        if not n:
            continue
        report.append('  %s host events per I/O: %s' % (kind, ', '.join(
            '%s=%.2g' % (ev[9:], c / n) for ev, c in sorted(host_counts[kind].items()))))
        report.append('  %s target events per I/O: %s' % (kind, ', '.join(
            '%s=%.2g' % (ev[10:], c / n) for ev, c in sorted(tgt_counts[kind].items()))))
    for ev, l in sorted(rx_lat.items()):
        l.sort()
        report.append('  %s: event time - recv_time: min %d us, median %d us, max %d us (n=%d)' % (
            ev, l[0] // 1000, l[len(l) // 2] // 1000, l[-1] // 1000, len(l)))
    if ios:
        # one full example I/O per kind
        seen = set()
        for io in ios:
            q = io['q'][2]
            kind = 'read' if q['write'] != '1' else ('write_inline' if q['inline'] == '1' else 'write_r2t')
            if kind in seen or io['end'] is None:
                continue
            seen.add(kind)
            tev = [e for e in tgt.get((io['key'][1], io['key'][2]), []) if io['start'] <= e[0] <= io['end']]
            report.append('  example %s I/O:' % kind)
            for e in sorted(io['host'] + tev, key=lambda e: e[0]):
                report.append('    ' + e[3].strip())
    for f in fails[:50]:
        report.append('  FAIL ' + f)
    return len(ios), fails


def main():
    out = sys.argv[1]
    report = []
    total_fail = 0
    total_io = 0
    jobs = sorted(f for f in os.listdir(out) if f.startswith('trace-') and f.endswith('.txt'))
    if not jobs:
        sys.exit('no trace-*.txt in %s' % out)
    for f in jobs:
        n, fails = check_job(f[6:-4], parse(os.path.join(out, f)), report)
        total_io += n
        total_fail += len(fails)
        if n == 0:
            report.append('  FAIL no I/O found')
            total_fail += 1
    report.append('TOTAL: %d I/Os checked, %d failures' % (total_io, total_fail))
    print('\n'.join(report))
    sys.exit(1 if total_fail else 0)


if __name__ == '__main__':
    main()
