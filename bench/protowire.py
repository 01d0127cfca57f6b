"""Protocol-buffer wire encoding by hand, for the benchmark scripts that call nmt-server over
gRPC on machines with python3-grpcio but no generated stubs (the GPU machine has no protoc):
bench/gpu_faults.py, bench/e2e/server/soak_mixed.py, bench/e2e/server/score_bench.py."""


def varint(n):
    """n as a base-128 varint."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, payload):
    """A length-delimited field (strings, bytes, messages): tag, length, payload."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def read_varint(data, i):
    """The varint at data[i:]: (its value, the index after it)."""
    shift = value = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i
