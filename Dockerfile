# ccrhost's image for deploy/kubernetes (docs/kubernetes.md):
#     docker build -t registry.example.com/ccrhost:0.1.0 .
# Every input is pinned (the base images by version tag, the Debian packages
# by version, the Python packages in deploy/image-constraints.txt), so a
# rebuild installs the same versions or fails, naming the one the mirror no
# longer has, rather than drifting.
# The DaemonSet's init container runs pyinfra from it (deploy/kubernetes/tune.py
# on @local), its main container Node Problem Detector, which runs
# `ccrhost check --format npd` as a custom plugin: both need ccrhost in the
# same image.

# Node Problem Detector's own release image; only its binary is taken. It is
# built on Debian bookworm, like the base below (the same glibc).
FROM registry.k8s.io/node-problem-detector/node-problem-detector:v0.8.20 AS npd

FROM python:3.12.11-slim-bookworm

# What the stages and the check run on the node: modprobe (kmod), ip and dcb
# (iproute2), setpci and lspci (pciutils), ethtool, systemctl (systemd, which
# talks to the host's systemd through its /run/systemd). nvidia-smi comes
# from the NVIDIA container runtime; mlnx_qos from MLNX_OFED is not here, so
# QoS goes through iproute2's dcb. Versions: Debian 12 (bookworm).
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        kmod=30+20221128-1 iproute2=6.1.0-3 pciutils=1:3.9.0-4 ethtool=1:6.1-1 systemd=252.39-1~deb12u2 \
    && rm -rf /var/lib/apt/lists/*

COPY --from=npd /node-problem-detector /usr/local/bin/node-problem-detector

WORKDIR /opt/ccrhost
COPY pyproject.toml README.md ./
COPY deploy/image-constraints.txt ./deploy/
COPY ccrhost/ ./ccrhost/
# No extras: `calc --chart` (matplotlib) is not what a node agent runs. The
# constraints by environment, so that pip's isolated build of ccrhost takes
# the pinned setuptools too (a -c option would not reach it).
RUN PIP_CONSTRAINT=/opt/ccrhost/deploy/image-constraints.txt pip install --no-cache-dir . \
    && rm -rf build ccrhost.egg-info
COPY deploys/ ./deploys/
COPY deploy/kubernetes/ ./deploy/kubernetes/

ENTRYPOINT ["ccrhost"]
CMD ["--help"]
