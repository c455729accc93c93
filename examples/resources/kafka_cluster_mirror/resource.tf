# A mirror of the "primary" cluster into the cluster the agent runs against.
# Destroying it stops mirroring of all its topics; the destination topics and
# their data stay.
resource "kafka_cluster_mirror" "dr" {
  name = "dr"
  source = {
    bootstrap_servers = ["kafka-1.primary.example:9092", "kafka-2.primary.example:9092"]
  }

  # KIP-1279's mirror configs, each optional (left out: the KIP's default,
  # which the state shows). Changed outside Terraform (kmirror update), they
  # show up as a planned change.
  consumer_groups_include   = ["app-.*"] # offsets synced, untranslated
  consumer_groups_exclude   = ["app-.*-test"]
  acl_include               = ["TOPIC;orders.*"] # source ACLs copied
  metadata_refresh_interval = "30s"
  topic_regex               = ["orders\\..*"] # also every matching topic, now or later

  # The same configs by their Kafka names; a key and its typed attribute
  # cannot both be set.
  config = {
    "mirror.topic.properties.exclude" = "follower.replication.throttled.replicas, leader.replication.throttled.replicas"
  }
}

# Live figures (source_cluster_id once the agent has connected, max_lag,
# state_counts) change between runs: read them in a check block or a data
# source, not in an output, so that `terraform plan -detailed-exitcode`
# stays 0 while nothing changes (see kafka_mirror_topic's example).
