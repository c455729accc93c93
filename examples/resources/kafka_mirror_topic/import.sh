# A mirror topic is imported as MIRROR/TOPIC.
terraform import kafka_mirror_topic.orders dr/orders
