"""Unpack an old glibc's headers and libraries into a sysroot, so the wheels link against them.

    python tools/glibc_sysroot.py ARCH DIR CC     (ARCH: amd64 or arm64; CC: the GCC to use)

prints CFLAGS=... and LDFLAGS=..., the flags that build with CC on DIR (setuptools appends both).

Why. A wheel's manylinux tag is bounded by the newest glibc symbol version its extensions
reference, and that is the version of the glibc they were linked against: built on Debian 12
(glibc 2.36), kime's pool referenced pthread_create@GLIBC_2.34, and the wheels were
manylinux_2_34, which RHEL 8, Ubuntu 20.04 and Debian 11 cannot install. Linked against Debian
11's glibc 2.31 (the oldest the Debian mirror still serves), every symbol kime uses resolves to
a version of glibc 2.17 or older, so auditwheel can tag the wheels manylinux_2_28 (torch's floor,
hence Laya's). The compiler stays the build machine's GCC (`gcc --sysroot DIR`): only libc's
headers and the libraries the link names come from here, so the object code, and every output
bit, is the native build's (tools/build_wheel.sh and tools/build_wheel_arm64.sh use it).

What. Debian bullseye's libc6, libc6-dev and linux-libc-dev for ARCH, fetched from the mirror
this host's apt uses (tools/debian_mirror.sh; KIME_SYSROOT_MIRROR overrides it), each checked
against the archive's signed InRelease (gpgv and the debian-archive-keyring) and its Packages
index, unpacked into DIR; absolute symlinks are made relative, so the linker never follows one
out of the sysroot into the host's newer glibc. DIR is reused when its stamp names the same
packages. No root, no apt, no emulation: a few megabytes, in seconds.
"""
from __future__ import annotations

import hashlib
import io
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path
from typing import Dict, List

SUITE = "bullseye"
PACKAGES = ("libc6", "libc6-dev", "linux-libc-dev")
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
HERE = Path(__file__).resolve().parent
TRIPLES = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}
ARCHES = tuple(TRIPLES)


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as response:
        return bytes(response.read())


def mirror() -> str:
    """The Debian mirror: KIME_SYSROOT_MIRROR, else the one tools/debian_mirror.sh names."""
    done = subprocess.run(["bash", str(HERE / "debian_mirror.sh"),
                           os.environ.get("KIME_SYSROOT_MIRROR", "")],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip().rstrip("/")


def verified_release(base: str) -> str:
    """The suite's InRelease, its signature checked by gpgv against the archive keyring."""
    signed = fetch("%s/dists/%s/InRelease" % (base, SUITE))
    if not (shutil.which("gpgv") and os.path.isfile(KEYRING)):
        sys.exit("glibc_sysroot: needs gpgv and %s (apt-get install gpgv debian-archive-keyring) "
                 "to check the archive's signature" % KEYRING)
    check = subprocess.run(["gpgv", "--keyring", KEYRING, "-"], input=signed,
                           capture_output=True)
    if check.returncode != 0:
        sys.exit("glibc_sysroot: %s's InRelease fails its signature check:\n%s"
                 % (SUITE, check.stderr.decode(errors="replace")))
    return signed.decode()


def sha256_of(release: str, name: str) -> str:
    """The SHA256 the Release file gives `name` (a path under dists/SUITE/)."""
    section = release.split("\nSHA256:\n", 1)[1]
    for line in section.splitlines():
        if not line.startswith(" "):
            break
        digest, _, path = line.split()
        if path == name:
            return digest
    sys.exit("glibc_sysroot: %s is not in %s's Release file" % (name, SUITE))


def checked(data: bytes, digest: str, what: str) -> bytes:
    if hashlib.sha256(data).hexdigest() != digest:
        sys.exit("glibc_sysroot: %s does not match its SHA256 in the archive's index" % what)
    return data


def stanzas(index: str) -> Dict[str, Dict[str, str]]:
    """Packages' stanzas by package name (the fields this script reads)."""
    found: Dict[str, Dict[str, str]] = {}
    for block in index.split("\n\n"):
        fields = dict(re.findall(r"^(Package|Version|Filename|SHA256): (.*)$", block, re.M))
        if fields.get("Package") in PACKAGES:
            found[fields["Package"]] = fields
    return found


def unpack_deb(deb: bytes, into: Path) -> None:
    """Extracts a .deb's data archive (an `ar` member data.tar.*) into `into`."""
    if not deb.startswith(b"!<arch>\n"):
        sys.exit("glibc_sysroot: not a Debian package")
    at = 8
    while at < len(deb):
        name = deb[at:at + 16].decode().strip()
        size = int(deb[at + 48:at + 58].decode().strip())
        body = deb[at + 60:at + 60 + size]
        at += 60 + size + (size & 1)
        if name.rstrip("/").startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body)) as tar:
                tar.extractall(into, filter="tar")
            return
    sys.exit("glibc_sysroot: a package without data.tar")


def relative_links(root: Path) -> None:
    """Points every absolute symlink under `root` inside it (relative), never at the host."""
    for path in root.rglob("*"):
        if path.is_symlink():
            target = os.readlink(path)
            if target.startswith("/"):
                inside = root / target.lstrip("/")
                path.unlink()
                path.symlink_to(os.path.relpath(inside, path.parent))


def make(arch: str, out: Path) -> None:
    base = mirror()
    release = verified_release(base)
    name = "main/binary-%s/Packages.xz" % arch
    index = lzma.decompress(checked(fetch("%s/dists/%s/%s" % (base, SUITE, name)),
                                    sha256_of(release, name), name)).decode()
    found = stanzas(index)
    missing = [p for p in PACKAGES if p not in found]
    if missing:
        sys.exit("glibc_sysroot: %s/%s has no %s" % (SUITE, arch, ", ".join(missing)))
    stamp = "\n".join("%s %s %s" % (p, found[p]["Version"], arch) for p in PACKAGES) + "\n"
    if (out / ".kime-sysroot").is_file() and (out / ".kime-sysroot").read_text() == stamp:
        return
    shutil.rmtree(out, ignore_errors=True)
    work = out.with_name(out.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for package in PACKAGES:
        fields = found[package]
        deb = checked(fetch("%s/%s" % (base, fields["Filename"])), fields["SHA256"], package)
        unpack_deb(deb, work)
    relative_links(work)
    (work / ".kime-sysroot").write_text(stamp)
    work.rename(out)


def flags(arch: str, root: Path, cc: str) -> Dict[str, str]:
    """The build's CFLAGS and LDFLAGS that put `cc` on the sysroot: headers from GCC itself and
    the sysroot only (-nostdinc: a cross GCC would otherwise read its own newer libc's headers
    first); crti/crtn and every library from the sysroot (-B, -L: GCC's driver searches its
    install's lib folders, the host's glibc, before the sysroot's)."""
    triple = TRIPLES[arch]
    gcc_include = subprocess.run([cc, "-print-file-name=include"], capture_output=True,
                                 text=True, check=True).stdout.strip()
    if not os.path.isfile(os.path.join(gcc_include, "stddef.h")):
        sys.exit("glibc_sysroot: %s is not a GCC with its own headers (%s)" % (cc, gcc_include))
    cflags = ["--sysroot=%s" % root, "-nostdinc", "-isystem", gcc_include,
              "-isystem", "%s/usr/include/%s" % (root, triple), "-isystem", "%s/usr/include" % root]
    ldflags = ["--sysroot=%s" % root, "-B%s/usr/lib/%s/" % (root, triple),
               "-L%s/lib/%s" % (root, triple), "-L%s/usr/lib/%s" % (root, triple)]
    return {"CFLAGS": " ".join(cflags), "LDFLAGS": " ".join(ldflags)}


def main(argv: List[str]) -> int:
    if len(argv) != 3 or argv[0] not in ARCHES:
        print("usage: python tools/glibc_sysroot.py {amd64,arm64} DIR CC\n"
              "  makes DIR (or reuses it) and prints the CFLAGS and LDFLAGS that build on it "
              "with the GCC CC, one NAME=VALUE a line", file=sys.stderr)
        return 2
    out = Path(argv[1]).absolute()
    make(argv[0], out)
    for name, value in flags(argv[0], out, argv[2]).items():
        print("%s=%s" % (name, value))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
