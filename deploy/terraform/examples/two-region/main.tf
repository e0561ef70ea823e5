# Two regions (or more), each a gateway pair at its data-center edge, wired to
# each other: every region's remote_regions lists the other regions' gateways
# at the addresses they advertise.

locals {
  # How each gateway is reached by gateways of other regions.
  as_remote = { for region, r in var.regions : region => [for g in r.gateways : {
    name    = g.name
    control = coalesce(g.control_advertise, g.control_listen)
    wan     = [for p in g.planes : coalesce(p.advertise, p.local)]
    gossip  = coalesce(g.gossip_advertise, g.gossip_bind)
  }] }

  remote_regions = { for region in keys(var.regions) : region => [
    for other in sort(keys(var.regions)) : {
      name     = other
      rtt_hint = lookup(var.rtt_hints, join("/", sort([region, other])), "0s")
      gateways = local.as_remote[other]
    } if other != region
  ] }
}

module "pair" {
  source   = "../../modules/gateway-pair"
  for_each = var.regions

  region         = each.key
  gateways       = each.value.gateways
  remote_regions = local.remote_regions[each.key]
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
