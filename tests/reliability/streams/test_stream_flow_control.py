#!/usr/bin/python3
"""A TranslateStream whose client sends 20000 requests and reads nothing for a while
(issue 14). A client that does not read its answers stops taking them once its HTTP/2 window
is full (the client here keeps gRPC's 64 KB default: no BDP probing; its own gRPC would
otherwise grow the window to megabytes and buffer the answers itself). From then on the
server's writes stall, and the server stops reading the stream once
server.max_stream_messages_in_flight of its messages are unanswered or unwritten (256 here,
which decodes this workload twice as fast as the default 64 and keeps the run short): the
number of messages it answered (its request log lines) stands still, far below 20000, and
its memory stays bounded. What the client can still push meanwhile is what the server's
HTTP/2 window for the stream admits (gRPC sizes it from its bandwidth-delay estimate: up to
16 MB per stream while memory is plentiful; 20000 small requests fit, so the client's sends
need not stall). Once the client reads, every request is answered, OK and in order.

The hold is shorter than the issue's 30 s: it ends once the server's answers and the
client's sends have both stood still for HOLD_STALL seconds (a few seconds in), since waiting
longer shows nothing more. Requests decode at most 4 tokens (beam 1), so that 20000 of them
fit a CI run: the point is flow control, not translation.

    test_stream_flow_control.py REPO_ROOT NMT_SERVER [REQUESTS]
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rel  # noqa: E402

check = rel.Checks()

HOLD_STALL = 4.0   # seconds without a send accepted or a message answered, during the hold
HOLD_MAX = 30.0    # the hold ends by then whatever happens
IN_FLIGHT = 256    # server.max_stream_messages_in_flight
RSS_BOUND_MB = 64  # server RSS growth allowed over its peak during a warm-up stream


def main():
    repo, binary = os.path.abspath(sys.argv[1]), sys.argv[2]
    total = int(sys.argv[3]) if len(sys.argv) > 3 else 20000
    tmp, pb, pb_grpc, health_pb2, health_pb2_grpc = rel.setup(repo, "nmt-flow-control-")
    config = os.path.join(tmp, "config.yaml")
    rel.write_config(config, os.path.join(repo, "models/m30k-en-de-small"),
                     server={"max_stream_messages_in_flight": IN_FLIGHT})
    server = rel.json_server(binary, config)
    grpc = rel.grpc
    options = pb.TranslateOptions(beam_size=1, max_decoding_length=4)

    texts = [b"A dog runs.", b"Two men sing.", b"A girl reads.", b"It is snowing."]

    def request(i):
        return pb.TranslateRequest(texts=[texts[i % len(texts)]], options=options, request_id=f"r{i}")

    try:
        server.wait_serving(health_pb2, health_pb2_grpc)
        with grpc.insecure_channel(server.target, options=[("grpc.http2.bdp_probe", 0)]) as channel:
            stub = pb_grpc.TranslationServiceStub(channel)
            # Warm-up: a stream read as it goes, so that the baseline includes the decode
            # loops' working memory: its peak, as the CPU engine's decode state comes with the
            # sentences in flight and goes with them (docs/data-flow.md, "Decode-state memory").
            warm_peak, warming = [0], [True]

            def sample_warm_rss():
                while warming[0]:
                    warm_peak[0] = max(warm_peak[0], rel.proc_status(server.proc.pid)["VmRSS"])
                    time.sleep(0.05)

            sampler = threading.Thread(target=sample_warm_rss)
            sampler.start()
            try:
                warm = list(stub.TranslateStream(iter([request(i) for i in range(500)]), timeout=300))
            finally:
                warming[0] = False
                sampler.join()
            check(len(warm) == 500 and all(r.status_code == 0 for r in warm), "warm-up stream: 500 answered")
            base_rss = max(warm_peak[0], rel.proc_status(server.proc.pid)["VmRSS"])

            sent = [0]

            def messages():
                for i in range(total):
                    yield request(i)
                    sent[0] = i + 1

            def answered():  # messages of the held stream the server has answered (logged)
                return len(rel.request_lines(server)) - logged_before

            logged_before = len(rel.request_lines(server))
            responses = stub.TranslateStream(messages(), timeout=600)
            start = time.monotonic()
            last, last_change, peak_rss = None, start, base_rss
            while time.monotonic() - start < HOLD_MAX:
                time.sleep(0.25)
                peak_rss = max(peak_rss, rel.proc_status(server.proc.pid)["VmRSS"])
                now = (sent[0], answered())
                if now != last:
                    last, last_change = now, time.monotonic()
                elif time.monotonic() - last_change >= HOLD_STALL:
                    break
            held = time.monotonic() - start
            taken = answered()
            growth_mb = (peak_rss - base_rss) / 1024
            # The client's 64 KB window holds a few hundred answers of ~100 bytes; the server
            # takes IN_FLIGHT more, then stops. Without the bound it would take all of them.
            check(time.monotonic() - last_change >= HOLD_STALL and IN_FLIGHT <= taken <= 2000,
                  f"client not reading for {held:.1f} s: the server answered {taken} messages "
                  f"(those the client's window took, plus max_stream_messages_in_flight "
                  f"{IN_FLIGHT}) and stopped reading; the client's sends reached {sent[0]} of {total}")
            check(growth_mb <= RSS_BOUND_MB,
                  f"server RSS {base_rss // 1024} MB at the warm-up's peak, at most {peak_rss // 1024} MB "
                  f"while held (+{growth_mb:.1f} MB, bound {RSS_BOUND_MB} MB)")

            read_start = time.monotonic()
            got, in_order, bad = 0, True, []
            for r in responses:
                if r.request_id != f"r{got}":
                    in_order = False
                if r.status_code != 0:
                    bad.append((r.request_id, r.status_code, r.status_message))
                got += 1
            took = time.monotonic() - read_start
            peak_rss = max(peak_rss, rel.proc_status(server.proc.pid)["VmRSS"])
            check(got == total and in_order and not bad,
                  f"once read: {got} of {total} answered in order, {len(bad)} not OK {bad[:3]} "
                  f"({took:.1f} s, {got / max(took, 1e-9):.0f}/s)")
            check(responses.code() == grpc.StatusCode.OK, f"the stream ends OK ({responses.code()})")
        check(server.proc.poll() is None, "the server is alive")
    except Exception as e:
        check(False, f"unexpected {type(e).__name__}: {e}")
    finally:
        rel.finish(check, server)


if __name__ == "__main__":
    main()
