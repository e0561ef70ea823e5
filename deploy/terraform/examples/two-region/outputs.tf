output "gateways" {
  description = "Every gateway's endpoints, by gateway name."
  value       = merge([for region, p in module.pair : p.gateways]...)
}

output "metrics_targets" {
  description = "admin addresses to scrape (deploy/prometheus/prometheus.yml), by region."
  value       = { for region, p in module.pair : region => [for name, g in p.gateways : g.admin] }
}

output "configs" {
  description = "Every gateway's rendered configuration, by gateway name (sensitive: it holds the gossip keys)."
  value       = merge([for region, p in module.pair : p.configs]...)
  sensitive   = true
}
