output "region" {
  description = "The region this pair serves."
  value       = var.region
}

output "gateways" {
  description = "Each gateway's endpoints: where it listens (lan, control, gossip, admin, planes), how other gateways reach it, its metrics URL and the host it is installed on."
  value = { for g in var.gateways : g.name => {
    region     = var.region
    ssh_host   = g.ssh_host
    lan        = g.lan_listen
    control    = g.control_listen
    gossip     = g.gossip_bind
    admin      = g.admin_listen
    planes     = { for p in g.planes : p.name => p.local }
    reach      = local.reach[g.name]
    metrics    = g.admin_listen == "" ? null : "http://${g.admin_listen}/metrics"
    readyz     = g.admin_listen == "" ? null : "http://${g.admin_listen}/readyz"
    config     = local.config_path
    config_sha = terraform_data.config[g.name].output.sha256
  } }
}

output "as_remote_region" {
  description = "This pair as another region's remote_regions entry sees it (add rtt_hint)."
  value = {
    name = var.region
    gateways = [for g in var.gateways : {
      name    = g.name
      control = local.reach[g.name].control
      wan     = local.reach[g.name].wan
      gossip  = local.reach[g.name].gossip
    }]
  }
}

output "configs" {
  description = "The rendered configuration of each gateway, by name (sensitive: it holds the gossip keys)."
  value       = local.configs
  sensitive   = true
}

output "installed" {
  description = "Whether each gateway was installed in this run (false when deploy is false)."
  value = {
    (var.gateways[0].name) = module.first.installed
    (var.gateways[1].name) = module.second.installed
  }
}
