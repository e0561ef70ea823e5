# Two regions (or more), each with 1 to 16 gateways at its data-center edge.
# Gossip wires them to each other: every gateway's configuration lists only
# gossip seeds (its region's other gateways and a few of other regions), and
# regions: entries only for RTT hints. Every gateway announces its own
# addresses in gossip, the *_advertise ones where given (use-gw1 here,
# listening on 0.0.0.0 behind NAT, announces its control_advertise).

locals {
  # Each region's gateways as the other regions see them.
  as_remote = { for region, r in var.regions : region => [for g in r.gateways : {
    name   = g.name
    gossip = coalesce(g.gossip_advertise, g.gossip_bind)
  }] }

  remote_regions = { for region in keys(var.regions) : region => [
    for other in sort(keys(var.regions)) : {
      name     = other
      rtt_hint = lookup(var.rtt_hints, join("/", sort([region, other])), null)
      gateways = local.as_remote[other]
    } if other != region
  ] }
}

module "region" {
  source   = "../../modules/gateway-region"
  for_each = var.regions

  region         = each.key
  gateways       = each.value.gateways
  remote_regions = local.remote_regions[each.key]
  remote_seeds   = var.remote_seeds
  control_deny   = var.control_deny
  gossip_keyring = var.gossip_keyring
  host_keys      = var.host_keys
  wan            = var.wan
  limits         = var.limits
  scheduler      = var.scheduler

  deploy      = var.deploy
  binary_file = var.binary_file
  certs_dir   = var.certs_dir
  ssh         = var.ssh
}

# This example called the module "pair" (modules/gateway-pair) before
# regions had more than two gateways: existing state moves over.
moved {
  from = module.pair
  to   = module.region
}
