"""A seeded server log of a given size: nginx access lines mixed with syslog lines.

Recipe (deterministic for a given ``seed`` and size): timestamps start at 2026-11-01 00:00:00
UTC and advance 0-2 s a line; 70% of lines are nginx combined-format requests (client IPs from
a pool of 5,000, paths built from 300 words with ids and query strings, methods, statuses,
sizes, referrers and 40 user agents), 30% syslog lines (``sshd``, ``kernel``, ``cron``,
``systemd``, an application with request ids, durations and error messages). Lines end in
``\\n``; the file is cut at the last whole line under the size.

Usage: ``python bench/gen_log.py OUT.log --mb 50`` (also ``write_log(path, n_bytes, seed)``).
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

__all__ = ["write_log"]

_WORDS = (
    "api v1 v2 users orders items cart checkout login logout search static img css js assets "
    "account settings profile admin reports export import health metrics status billing "
    "invoice payment refund shipping tracking product category review comment upload download "
    "files docs help faq blog post tag archive feed rss sitemap robots favicon auth token "
    "session oauth callback webhook events notify push queue jobs tasks worker cache config"
).split()
_AGENTS = [
    f"Mozilla/5.0 ({os_}) AppleWebKit/537.36 (KHTML, like Gecko) {br}/{v}.0.{b} Safari/537.36"
    for os_ in (
        "Windows NT 10.0; Win64; x64",
        "Macintosh; Intel Mac OS X 10_15_7",
        "X11; Linux x86_64",
        "Linux; Android 14; Pixel 8",
    )
    for br, v, b in (
        ("Chrome", 120, 6099),
        ("Chrome", 119, 6045),
        ("Edg", 120, 2210),
        ("OPR", 105, 4970),
        ("Firefox", 121, 0),
    )
] + [
    "curl/8.4.0",
    "python-requests/2.31.0",
    "Go-http-client/1.1",
    "Googlebot/2.1 (+http://www.google.com/bot.html)",
    "kube-probe/1.28",
] * 4
_METHODS = ["GET"] * 14 + ["POST"] * 4 + ["PUT", "DELETE", "HEAD"]
_STATUSES = [200] * 30 + [201, 204, 301, 302, 304, 304, 400, 401, 403, 404, 404, 429, 500, 502]
_ERRORS = [
    "connection reset by peer",
    "upstream timed out (110: Connection timed out) while reading response header",
    "deadline exceeded after {ms} ms",
    'duplicate key value violates unique constraint "orders_pkey"',
    "invalid token: signature has expired",
    "could not serialize access due to concurrent update",
    "no space left on device while writing /var/lib/app/cache/{hex}",
    "too many open files",
]


def _ip(rng: random.Random) -> str:
    first = rng.choice((10, 172, 192, 81, 93, 185))
    return f"{first}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"


def _path(rng: random.Random) -> str:
    parts = [rng.choice(_WORDS) for _ in range(rng.randint(1, 4))]
    if rng.random() < 0.5:
        parts.append(str(rng.randrange(1, 10 ** rng.randint(2, 7))))
    path = "/" + "/".join(parts)
    if rng.random() < 0.3:
        path += f"?{rng.choice(_WORDS)}={rng.choice(_WORDS)}&page={rng.randint(1, 40)}"
    return path


def _line(rng: random.Random, t: float, host: str, ips: list[str]) -> str:
    stamp = time.gmtime(t)
    if rng.random() < 0.7:
        ts = time.strftime("%d/%b/%Y:%H:%M:%S +0000", stamp)
        ref = "-" if rng.random() < 0.6 else f"https://shop.example.com{_path(rng)}"
        size = 0 if rng.random() < 0.1 else int(rng.lognormvariate(8, 1.5))
        return (
            f'{rng.choice(ips)} - - [{ts}] "{rng.choice(_METHODS)} {_path(rng)} HTTP/1.1" '
            f'{rng.choice(_STATUSES)} {size} "{ref}" "{rng.choice(_AGENTS)}" '
            f"rt={rng.lognormvariate(-3, 1.2):.3f}\n"
        )
    ts = time.strftime("%b %d %H:%M:%S", stamp)
    pid = rng.randint(300, 65000)
    kind = rng.random()
    if kind < 0.2:
        user = rng.choice(("root", "deploy", "admin", "git", "ubuntu", "test", "oracle"))
        ok = rng.random() < 0.4
        msg = (
            f"sshd[{pid}]: {'Accepted publickey' if ok else 'Failed password'} for "
            f"{'' if ok else 'invalid user ' if rng.random() < 0.5 else ''}{user} from "
            f"{_ip(rng)} port {rng.randint(1024, 65535)} ssh2"
        )
    elif kind < 0.35:
        msg = (
            f"kernel: [{t % 10**6:.6f}] TCP: request_sock_TCP: Possible SYN flooding on port "
            f"{rng.choice((80, 443, 8080))}. Sending cookies."
            if rng.random() < 0.3
            else f"kernel: [{t % 10**6:.6f}] eth0: link up, {rng.choice((1000, 10000))} Mbps"
        )
    elif kind < 0.45:
        msg = (
            f"CRON[{pid}]: (root) CMD (/usr/local/bin/{rng.choice(_WORDS)}-{rng.choice(_WORDS)}.sh)"
        )
    elif kind < 0.55:
        unit = f"{rng.choice(_WORDS)}-{rng.choice(_WORDS)}.service"
        msg = f"systemd[1]: {rng.choice(('Started', 'Stopped', 'Reloading', 'Starting'))} {unit}."
    else:
        rid = f"{rng.getrandbits(64):016x}"
        level = rng.choice(("INFO",) * 6 + ("WARN", "ERROR", "DEBUG"))
        if level == "ERROR":
            err = rng.choice(_ERRORS).format(
                ms=rng.randint(100, 30000), hex=f"{rng.getrandbits(32):08x}"
            )
            text = f"{rng.choice(_WORDS)}.{rng.choice(_WORDS)} failed: {err}"
        else:
            text = (
                f"{rng.choice(_METHODS)} {_path(rng)} user={rng.randint(1, 99999)} "
                f"took {rng.lognormvariate(3, 1):.1f}ms rows={rng.randint(0, 500)}"
            )
        msg = f"app[{pid}]: {level} request_id={rid} {text}"
    return f"{ts} {host} {msg}\n"


def write_log(path: str | Path, n_bytes: int, seed: int = 0) -> int:
    """Write the log (UTF-8, at most ``n_bytes``) to ``path``; its size in bytes."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    ips = [_ip(rng) for _ in range(5000)]
    t = 1_793_491_200.0  # 2026-11-01 00:00:00 UTC
    written = 0
    out: list[str] = []
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        while True:
            t += rng.random() * 2
            line = _line(rng, t, rng.choice(("web-01", "web-02", "db-01", "worker-03")), ips)
            if written + len(line) > n_bytes:
                break
            written += len(line)
            out.append(line)
            if len(out) >= 10_000:
                f.write("".join(out))
                out.clear()
        f.write("".join(out))
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--mb", type=float, default=50.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    n = write_log(a.out, int(a.mb * 1e6), a.seed)
    print(f"{a.out}: {n:,} bytes")


if __name__ == "__main__":
    main()
