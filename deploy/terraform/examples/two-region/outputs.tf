output "gateways" {
  description = "Every gateway's endpoints, by gateway name."
  value       = merge([for region, p in module.pair : p.gateways]...)
}

output "metrics_targets" {
  description = "The admin addresses to scrape, in Prometheus file_sd format (one target group per region, labelled pair): terraform output -json metrics_targets > deploy/prometheus/targets/mrgw.yml (JSON is YAML)."
  value = [for region, p in module.pair : {
    targets = [for name, g in p.gateways : g.admin if g.admin != ""]
    labels  = { pair = region }
  }]
}

output "configs" {
  description = "Every gateway's rendered configuration, by gateway name (sensitive: it holds the gossip keys)."
  value       = merge([for region, p in module.pair : p.configs]...)
  sensitive   = true
}
