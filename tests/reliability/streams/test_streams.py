#!/usr/bin/python3
"""1000 concurrent TranslateStream streams: all open at once (each has its first answer before
any sends its second message), every message answered OK, the server's threads stay bounded
(no thread per stream) and its file descriptors return to their idle level once the streams
close.

    test_streams.py REPO_ROOT NMT_SERVER [STREAMS]
"""
import asyncio
import os
import resource
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rel  # noqa: E402

check = rel.Checks()


async def run_streams(target, pb, pb_grpc, n, channels=8):
    grpc = rel.grpc
    chans = [grpc.aio.insecure_channel(target) for _ in range(channels)]
    stubs = [pb_grpc.TranslationServiceStub(c) for c in chans]
    all_open = asyncio.Event()
    first = [0]
    answers = []

    async def one(i):
        call = stubs[i % channels].TranslateStream(timeout=600)
        text = rel.SENTENCES[i % len(rel.SENTENCES)]
        opts = pb.TranslateOptions(beam_size=1)
        await call.write(pb.TranslateRequest(texts=[text], options=opts, request_id=f"s{i}-0"))
        r1 = await call.read()
        first[0] += 1
        if first[0] == n:
            all_open.set()
        await asyncio.wait_for(all_open.wait(), 600)
        await call.write(pb.TranslateRequest(texts=[text], options=opts, request_id=f"s{i}-1"))
        await call.done_writing()
        r2 = await call.read()
        end = await call.read()
        answers.append((r1.status_code, r1.request_id, r2.status_code, r2.request_id, end is grpc.aio.EOF,
                        await call.code(), i))

    results = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
    for c in chans:
        await c.close()
    return [r for r in results if isinstance(r, Exception)], answers


def main():
    repo, binary = os.path.abspath(sys.argv[1]), sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    tmp, pb, pb_grpc, health_pb2, health_pb2_grpc = rel.setup(repo, "nmt-streams-")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 8192)), hard))
    config = os.path.join(tmp, "config.yaml")
    rel.write_config(config, os.path.join(repo, "models/m30k-en-de-small"))
    server = rel.Server(binary, config)
    try:
        server.wait_serving(health_pb2, health_pb2_grpc)
        idle = rel.proc_status(server.proc.pid)
        with open(f"/proc/{server.proc.pid}/limits") as f:
            limits = [l.strip() for l in f if l.startswith(("Max processes", "Max open files"))]
        print("server limits:", limits)
        peak = dict(idle)
        done = [False]

        async def sample():
            while not done[0]:
                s = rel.proc_status(server.proc.pid)
                for k in ("Threads", "fds", "VmRSS"):
                    peak[k] = max(peak[k], s[k])
                await asyncio.sleep(0.2)

        async def main_async():
            sampler = asyncio.ensure_future(sample())
            try:
                return await run_streams(server.target, pb, pb_grpc, n)
            finally:
                done[0] = True
                await sampler

        start = time.monotonic()
        errors, answers = asyncio.run(main_async())
        seconds = time.monotonic() - start
        good = [a for a in answers if a[0] == 0 and a[2] == 0 and a[4] and a[5] == rel.grpc.StatusCode.OK]
        check(not errors and len(good) == n,
              f"{n} streams open at once, {len(good)} answered both messages OK in {seconds:.1f} s "
              f"({len(errors)} errors{': ' + repr(errors[0])[:300] if errors else ''})")
        check(all(a[1] == f"s{a[6]}-0" and a[3] == f"s{a[6]}-1" for a in answers),
              "each stream got its own answers, in order (request ids)")
        print(f"server idle: {idle}; peak during the streams: {peak}")
        # The callback API holds no thread per stream: gRPC's pools are bounded (they scale
        # with the cores, its executor up to 2 threads per core).
        bound = max(64, 3 * (os.cpu_count() or 1))
        check(peak["Threads"] <= bound, f"peak threads {peak['Threads']} (at most {bound}: none per stream)")
        settled = rel.wait_for(lambda: rel.proc_status(server.proc.pid)["fds"] <= idle["fds"] + 16, 30)
        now = rel.proc_status(server.proc.pid)
        check(settled, f"fds back to idle after the streams: {idle['fds']} -> peak {peak['fds']} -> {now['fds']}")
        code, _, _, _ = rel.call(pb_grpc.TranslationServiceStub(rel.grpc.insecure_channel(server.target)).Translate,
                                 pb.TranslateRequest(texts=["A dog runs."]), timeout=30)
        check(code == "OK", f"serves after the streams: {code}")
    except Exception as e:
        check(False, f"unexpected {type(e).__name__}: {e}")
    finally:
        rel.finish(check, server)


if __name__ == "__main__":
    main()
