#!/usr/bin/python3
"""SIGTERM under load: 32 closed-loop clients and 4 streams keep the server busy; on SIGTERM
every request it had accepted is answered OK (the log and the clients agree one to one),
calls after that are refused UNAVAILABLE without being accepted, no client hangs, and the
process exits 0.

A call that reaches the server in the instant between SIGTERM and its GOAWAY reaching the
client is cancelled by gRPC itself (gRPC 1.51 cancels every call that arrives after
Server::Shutdown, before any service sees it): the client gets CANCELLED, the server logs
nothing. That is allowed, but only for a call sent before the fresh call below was refused,
and never for a request the server took (every logged request is OK).

    test_sigterm.py REPO_ROOT NMT_SERVER
"""
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rel  # noqa: E402

check = rel.Checks()


def main():
    repo, binary = os.path.abspath(sys.argv[1]), sys.argv[2]
    tmp, pb, pb_grpc, health_pb2, health_pb2_grpc = rel.setup(repo, "nmt-sigterm-")
    config = os.path.join(tmp, "config.yaml")
    rel.write_config(config, os.path.join(repo, "models/m30k-en-de-small"))
    # The grace period bounds the drain; generous here so that slow builds (TSan: 10-20x)
    # still drain everything that was accepted. What runs past the grace is cancelled.
    server = rel.json_server(binary, config, ["--shutdown-grace-seconds", "300"])
    results, lock = [], threading.Lock()
    stop = threading.Event()
    try:
        server.wait_serving(health_pb2, health_pb2_grpc)
        channel = rel.grpc.insecure_channel(server.target)
        stub = pb_grpc.TranslationServiceStub(channel)

        def client(i):
            request = pb.TranslateRequest(texts=[rel.SENTENCES[(i + k) % len(rel.SENTENCES)] for k in range(1 + i % 4)])
            while not stop.is_set():
                sent = time.monotonic()
                r = rel.call(stub.Translate, request, timeout=120)
                with lock:
                    results.append(("unary", r[0], r[2], sent))
                if r[0] != "OK":
                    return

        def streamer(i):
            def messages():
                for k in range(20):
                    yield pb.TranslateRequest(texts=[rel.SENTENCES[k % len(rel.SENTENCES)]])
                    time.sleep(0.05)
            try:
                for r in stub.TranslateStream(messages(), timeout=120):
                    with lock:
                        results.append(("stream", rel.grpc.StatusCode.OK.name if r.status_code == 0 else str(r.status_code), r.status_message))
            except rel.grpc.RpcError as e:
                with lock:
                    results.append(("stream-end", e.code().name, e.details()))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(32)]
        threads += [threading.Thread(target=streamer, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        # SIGTERM once every client has had answers (the load is established), at most 120 s.
        rel.wait_for(lambda: len(results) >= 64, 120, 0.2)
        with lock:
            before = len(results)
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        with rel.grpc.insecure_channel(server.target) as fresh:
            code, _, _, _ = rel.call(pb_grpc.TranslationServiceStub(fresh).Translate,
                                     pb.TranslateRequest(texts=["A dog runs."]), timeout=10)
        refused_fresh = time.monotonic()
        check(code == "UNAVAILABLE", f"a new call after SIGTERM is refused: {code}")
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(timeout=120)
        check(not any(t.is_alive() for t in threads), "no client hangs")
        try:
            rc = server.proc.wait(timeout=60)
        except Exception:
            rc = None
        check(rc == 0, f"exit 0 after draining (got {rc})")
        channel.close()

        ok = [r for r in results if r[1] == "OK"]
        other = [r for r in results if r[1] != "OK"]
        check(before > 0 and len(ok) > before, f"load before SIGTERM: {before} answers; in all {len(ok)} OK")
        def raced(r):
            """A Translate call cancelled by gRPC in the race with its GOAWAY: sent before the
            fresh call was refused. The log checks below show the server took none of them."""
            return r[0] == "unary" and r[1] == "CANCELLED" and r[3] <= refused_fresh

        check(all(r[1] == "UNAVAILABLE" or raced(r) for r in other),
              f"the only failures are calls refused after SIGTERM (UNAVAILABLE) or cancelled by gRPC in "
              f"the race with its GOAWAY ({sum(map(raced, other))}): {sorted(set((r[0], r[1]) for r in other))}")
        lines = rel.request_lines(server)
        logged_ok = sum(1 for line in lines if line["code"] == "OK")
        check(all(line["code"] == "OK" for line in lines),
              f"every request the server accepted was answered OK: {sorted(set(l['code'] for l in lines))}")
        check(logged_ok == len(ok), f"server and clients agree: {logged_ok} logged OK, {len(ok)} received OK")
        log = server.output()
        check("shutting down" in log and "stopped" in log.split("shutting down")[-1], "the log says shutting down, then stopped")
    except Exception as e:
        check(False, f"unexpected {type(e).__name__}: {e}")
    finally:
        stop.set()
        server.stop()
        if check.failures:
            print(server.output()[-4000:])
    check.exit()


if __name__ == "__main__":
    main()
