resource "kafka_mirror_topic" "orders" {
  mirror = kafka_cluster_mirror.dr.name
  topic  = "orders"

  # mirroring (default), paused, stopped (failover) or promoted (stop at
  # lag 0). stopped and promoted are final: the destination topic becomes
  # writable, and mirroring back needs a mirror in the other direction.
  state = "mirroring"

  timeouts {
    update = "30m" # how long a change of state may take (a promote waits for lag 0)
  }
}

# Destroying the resource stops mirroring (failover) and leaves the
# destination topic and its data in place.

# Lag in a check block, not an output: an output of live figures changes at
# every refresh, so `terraform plan -detailed-exitcode` (what CI drift checks
# run) would exit 2 on every run. A check only warns, and it sees the figures
# each plan refreshes. (A data source nested in the check would be planned as
# a read during apply: a change, for -detailed-exitcode.) try() treats an
# unknown lag (null: the agent has not read the source's end) as a failed
# check, never as 0.
check "orders_lag" {
  assert {
    condition     = try(kafka_mirror_topic.orders.max_lag < 10000, false)
    error_message = "orders is more than 10000 records behind, or its lag is unknown: ${kafka_mirror_topic.orders.reason}"
  }
}

# Failback: after orders was stopped (or promoted) above, mirror it back into
# the old primary with the agent whose destination is the old primary (a
# second provider configuration) and a mirror reading this cluster. It
# resumes at the last mirrored offsets; if the old primary took records after
# them, it is refused unless recreate = true, which copies those records to
# the side topic in divergent_topic first.
#
# resource "kafka_mirror_topic" "orders_back" {
#   provider = kafka.primary
#   mirror   = "back" # reads this cluster, on the old primary's agent
#   topic    = "orders"
#   failback = true
#   recreate = true
# }
