# Cap what the agent fetches for mirror "dr" at 10 MiB/s, so that catching
# up on a backlog leaves bandwidth for the source's own clients. Changes
# apply at once, without restarting the mirror.
resource "kafka_mirror_throttle" "dr" {
  mirror                = kafka_cluster_mirror.dr.name
  rate_bytes_per_second = 10485760

  # Every partition of the mirror (the default), or some: ["orders:0", "orders:1"].
  partitions = ["*"]

  # Also set consumer_byte_rate for the agent's client id of this mirror
  # (kmirror-dr) on the source cluster; removed with the throttle.
  source_quota = false
}

# Destroying the resource lifts the throttle.
