# NCCL settings for interactive shells and job scripts, the same as the
# ccrhost block in /etc/nccl.conf. Variables already set are left alone.
[ -n "${NCCL_IB_HCA+set}" ] || export NCCL_IB_HCA==mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1
[ -n "${NCCL_IB_TC+set}" ] || export NCCL_IB_TC=106
[ -n "${NCCL_IB_FIFO_TC+set}" ] || export NCCL_IB_FIFO_TC=106
[ -n "${NCCL_IB_ROCE_VERSION_NUM+set}" ] || export NCCL_IB_ROCE_VERSION_NUM=2
[ -n "${NCCL_IB_ADDR_FAMILY+set}" ] || export NCCL_IB_ADDR_FAMILY=AF_INET
[ -n "${NCCL_SOCKET_IFNAME+set}" ] || export NCCL_SOCKET_IFNAME==eth0
