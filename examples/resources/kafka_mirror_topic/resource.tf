resource "kafka_mirror_topic" "orders" {
  mirror = kafka_cluster_mirror.dr.name
  topic  = "orders"
}

output "orders_max_lag" {
  value = kafka_mirror_topic.orders.max_lag
}
