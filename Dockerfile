# ccrhost's image for deploy/kubernetes (docs/kubernetes.md):
#     docker build -t registry.example.com/ccrhost:0.1.0 .
# The DaemonSet's init container runs pyinfra from it (deploy/kubernetes/tune.py
# on @local), its main container Node Problem Detector, which runs
# `ccrhost check --format npd` as a custom plugin: both need ccrhost in the
# same image.

# Node Problem Detector's own release image; only its binary is taken. It is
# built on Debian bookworm, like the base below (the same glibc).
FROM registry.k8s.io/node-problem-detector/node-problem-detector:v0.8.20 AS npd

FROM python:3.12-slim-bookworm

# What the stages and the check run on the node: modprobe (kmod), ip and dcb
# (iproute2), setpci and lspci (pciutils), ethtool, systemctl (systemd, which
# talks to the host's systemd through its /run/systemd). nvidia-smi comes
# from the NVIDIA container runtime; mlnx_qos from MLNX_OFED is not here, so
# QoS goes through iproute2's dcb.
RUN apt-get update \
    && apt-get install -y --no-install-recommends kmod iproute2 pciutils ethtool systemd \
    && rm -rf /var/lib/apt/lists/*

COPY --from=npd /node-problem-detector /usr/local/bin/node-problem-detector

WORKDIR /opt/ccrhost
COPY pyproject.toml README.md ./
COPY ccrhost/ ./ccrhost/
RUN pip install --no-cache-dir . && rm -rf build ccrhost.egg-info
COPY deploys/ ./deploys/
COPY deploy/kubernetes/ ./deploy/kubernetes/

ENTRYPOINT ["ccrhost"]
CMD ["--help"]
