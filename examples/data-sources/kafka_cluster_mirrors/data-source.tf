data "kafka_cluster_mirrors" "all" {}

output "mirror_names" {
  value = [for m in data.kafka_cluster_mirrors.all.mirrors : m.name]
}
