# A throttle is imported by its mirror's name.
terraform import kafka_mirror_throttle.dr dr
