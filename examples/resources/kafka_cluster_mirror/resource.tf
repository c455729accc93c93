# A mirror of the "primary" cluster into the cluster the agent runs against.
# Destroying it stops mirroring of all its topics; the destination topics and
# their data stay.
resource "kafka_cluster_mirror" "dr" {
  name = "dr"
  source = {
    bootstrap_servers = ["kafka-1.primary.example:9092", "kafka-2.primary.example:9092"]
  }
}
