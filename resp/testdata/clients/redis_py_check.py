"""redis-py's ordinary use against a tally replica's RESP port.

Run by resp/clients_test.go with Debian's /usr/bin/python3 (package
python3-redis): redis_py_check.py HOST PORT TOKEN PREFIX. Every reply is
compared with what Redis would answer; the first mismatch exits 1, and
the last line says how many checks passed.
"""

import sys

import redis

host, port, token, p = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
checks = 0


def want(what, got, expected):
    global checks
    if got != expected:
        print(f"redis-py: {what}: got {got!r}, want {expected!r}", file=sys.stderr)
        sys.exit(1)
    checks += 1


def want_error(what, fn, exc, code):
    try:
        got = fn()
    except exc as e:
        want(what, str(e).endswith(f"(code {code})"), True)
        return
    print(f"redis-py: {what}: got {got!r}, want {exc.__name__} (code {code})", file=sys.stderr)
    sys.exit(1)


anon = redis.Redis(host=host, port=port, decode_responses=True)
want("PING", anon.ping(), True)
# redis-py raises a NOAUTH reply as AuthenticationError.
want_error("INCR without AUTH", lambda: anon.incr(f"{p}:views"), redis.exceptions.AuthenticationError, "unauthorized")
anon.close()

r = redis.Redis(host=host, port=port, password=token, decode_responses=True)
want("PING", r.ping(), True)
want("INCR", r.incr(f"{p}:views"), 1)
want("INCRBY", r.incrby(f"{p}:views", 4), 5)
want("GET", r.get(f"{p}:views"), "5")
want("GET of a missing key", r.get(f"{p}:missing"), None)

item = f"likes:{p}.post"
want("SADD two", r.sadd(item, "alice", "bob"), 2)
want("SADD one new", r.sadd(item, "alice", "carol"), 1)
want("SCARD", r.scard(item), 3)
want("SISMEMBER bob", bool(r.sismember(item, "bob")), True)
want("SISMEMBER dave", bool(r.sismember(item, "dave")), False)
want("SMEMBERS", r.smembers(item), {"alice", "bob", "carol"})

want("PFADD", r.pfadd(f"{p}:visitors", "u1", "u2", "u3"), 1)
want("PFADD again", r.pfadd(f"{p}:visitors", "u1"), 0)
want("PFCOUNT", r.pfcount(f"{p}:visitors"), 3)

# MULTI/EXEC: both increments in one transaction, both replies listed.
with r.pipeline(transaction=True) as tx:
    tx.incr(f"{p}:tx")
    tx.incr(f"{p}:tx")
    want("MULTI INCR INCR EXEC", tx.execute(), [1, 2])
want("GET after EXEC", r.get(f"{p}:tx"), "2")

# SCAN lists counters and sets, not unique counts.
want("scan_iter counters", set(r.scan_iter(match=f"{p}:*")), {f"{p}:views", f"{p}:tx"})
want("scan_iter sets", set(r.scan_iter(match=f"likes:{p}.*", count=1)), {item})
want("EXISTS", r.exists(f"{p}:views", f"{p}:missing"), 1)
want("TYPE counter", r.type(f"{p}:views"), "string")
want("TYPE set", r.type(item), "set")
want("TYPE missing", r.type(f"{p}:missing"), "none")
r.close()

print(f"redis-py {redis.__version__}: {checks} checks ok")
