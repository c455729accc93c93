# A mirror is imported by its name.
terraform import kafka_cluster_mirror.dr dr
