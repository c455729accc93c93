data "kafka_cluster_mirror" "dr" {
  name = "dr"
}

output "dr_partitions_by_state" {
  value = data.kafka_cluster_mirror.dr.state_counts
}

# The mirror's settings as the agent uses them, defaults included.
output "dr_synced_groups" {
  value = data.kafka_cluster_mirror.dr.consumer_groups_include
}

check "dr_lag" {
  assert {
    condition     = data.kafka_cluster_mirror.dr.max_lag < 10000
    error_message = "Mirror dr is more than 10000 records behind."
  }
}
