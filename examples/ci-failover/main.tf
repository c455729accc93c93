# A disaster-recovery mirror of one topic, driven by a CI job
# (ci-failover.sh): the job checks for drift, then promotes the topic by
# changing topic_state, then checks that the destination accepts writes.

terraform {
  required_providers {
    kafka = { source = "kmirror/kafka" }
  }
}

variable "agent_url" {
  type        = string
  description = "URL of the kmirror agent next to the destination cluster."
}

variable "token" {
  type        = string
  sensitive   = true
  default     = null
  description = "Bearer token of the agent (or set KMIRROR_TOKEN)."
}

variable "source_bootstrap" {
  type        = list(string)
  description = "Source cluster brokers, HOST:PORT."
}

variable "topic" {
  type    = string
  default = "orders"
}

variable "topic_state" {
  type        = string
  default     = "mirroring"
  description = "mirroring, paused, stopped (failover) or promoted (stop at lag 0). stopped and promoted are final."
}

provider "kafka" {
  agent_url = var.agent_url
  token     = var.token
}

resource "kafka_cluster_mirror" "dr" {
  name   = "dr"
  source = { bootstrap_servers = var.source_bootstrap }
}

resource "kafka_mirror_topic" "this" {
  mirror = kafka_cluster_mirror.dr.name
  topic  = var.topic
  state  = var.topic_state

  timeouts {
    update = "15m" # a promote waits until the destination has caught up
  }
}

output "topic" {
  value = kafka_mirror_topic.this.topic
}

output "topic_state" {
  value = kafka_mirror_topic.this.state
}

# No output here depends on live figures (partitions, max_lag): they change
# at every refresh, and a changed output makes plan -detailed-exitcode
# exit 2 as drift would. ci-failover.sh prints the final offsets from the
# state instead.
