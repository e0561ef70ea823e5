output "gateways" {
  description = "Every gateway's endpoints, by gateway name."
  value       = merge([for region, m in module.region : m.gateways]...)
}

output "metrics_targets" {
  description = "The admin addresses to scrape, in Prometheus file_sd format (one target group per region, labelled site: the gateways' own region label would clash): terraform output -json metrics_targets > deploy/prometheus/targets/mrgw.yml (JSON is YAML)."
  value = [for region, m in module.region : {
    targets = [for name, g in m.gateways : g.admin if g.admin != ""]
    labels  = { site = region }
  }]
}

output "configs" {
  description = "Every gateway's rendered configuration, by gateway name (sensitive: it holds the gossip keys)."
  value       = merge([for region, m in module.region : m.configs]...)
  sensitive   = true
}
