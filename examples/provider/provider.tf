terraform {
  required_providers {
    kafka = {
      source = "kmirror/kafka"
    }
  }
}

# agent_url and token fall back on KMIRROR_ADDR and KMIRROR_TOKEN.
provider "kafka" {
  agent_url   = "https://kmirror.example:8080"
  token       = var.kmirror_token
  ca_cert_pem = file("${path.module}/kmirror-ca.pem")
}

variable "kmirror_token" {
  type      = string
  sensitive = true
}
