data "kafka_mirror_topic" "orders" {
  mirror = "dr"
  topic  = "orders"
}

check "orders_caught_up" {
  assert {
    condition     = data.kafka_mirror_topic.orders.max_lag < 10000
    error_message = "The orders mirror is more than 10000 records behind."
  }
}
