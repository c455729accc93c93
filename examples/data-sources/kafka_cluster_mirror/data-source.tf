data "kafka_cluster_mirror" "dr" {
  name = "dr"
}

output "dr_partitions_by_state" {
  value = data.kafka_cluster_mirror.dr.state_counts
}
