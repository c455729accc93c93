# The quickstart that `make demo` applies: one mirror from the source cluster
# into the cluster the agent writes to, and three mirror topics: a plain one
# that the demo fails over, a transactional one and a compacted one.
terraform {
  required_providers {
    kafka = {
      source = "kmirror/kafka"
    }
  }
}

variable "agent_url" {
  description = "URL of the kmirror agent's API."
  type        = string
  default     = "http://127.0.0.1:8080"
}

variable "source_bootstrap_servers" {
  description = "HOST:PORT of the source cluster's brokers."
  type        = list(string)
}

variable "orders_state" {
  description = "mirroring, paused, stopped (failover) or promoted (switch over at lag 0)."
  type        = string
  default     = "mirroring"
}

provider "kafka" {
  agent_url = var.agent_url
}

resource "kafka_cluster_mirror" "dr" {
  name = "dr"
  source = {
    bootstrap_servers = var.source_bootstrap_servers
  }
}

resource "kafka_mirror_topic" "orders" {
  mirror = kafka_cluster_mirror.dr.name
  topic  = "orders"
  state  = var.orders_state
}

# A transactional topic: only committed records become visible on the
# destination, aborted ones stay invisible there as on the source.
resource "kafka_mirror_topic" "payments" {
  mirror = kafka_cluster_mirror.dr.name
  topic  = "payments"
}

# A compacted topic: the offsets compaction removed stay invisible on the
# destination, so every remaining record keeps its offset.
resource "kafka_mirror_topic" "customers" {
  mirror = kafka_cluster_mirror.dr.name
  topic  = "customers"
}

# Live figures belong in a check (it warns) rather than an output (which
# changes at every refresh and makes every plan report a change).
check "orders_lag" {
  assert {
    condition     = try(kafka_mirror_topic.orders.max_lag < 10000, false)
    error_message = "orders is more than 10000 records behind, or its lag is unknown: ${kafka_mirror_topic.orders.reason}"
  }
}
