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

output "orders_max_lag" {
  value = kafka_mirror_topic.orders.max_lag
}
