# Rolling installation: gateway 0, then 1, and so on, each only after the one
# before answers /readyz (gateway-host waits for it), so at most one gateway
# of the region is down at a time. Terraform runs the instances of a count or
# for_each in parallel and cannot order them, so there is one module call per
# position, each depending on the one before: 16, a region's largest size.
# Calls past the last gateway have count 0. Keep the chain intact (the deploy
# tests check it): install_N uses var.gateways[N] and depends on install_N-1.

locals {
  # Per position: the gateway's installation inputs.
  install = [for g in var.gateways : {
    name        = g.name
    ssh_host    = g.ssh_host
    admin       = g.admin_listen
    config      = local.configs[g.name]
    config_hash = terraform_data.config[g.name].output.sha256
  }]
}

module "install_0" {
  source = "../gateway-host"
  count  = length(var.gateways) > 0 ? 1 : 0

  enabled     = var.deploy
  name        = local.install[0].name
  ssh_host    = local.install[0].ssh_host
  ssh         = var.ssh
  install     = var.install
  config      = local.install[0].config
  config_hash = local.install[0].config_hash
  admin       = local.install[0].admin
  binary_file = var.binary_file
  unit_file   = local.unit_file
  certs_dir   = var.certs_dir
}

module "install_1" {
  source     = "../gateway-host"
  count      = length(var.gateways) > 1 ? 1 : 0
  depends_on = [module.install_0]

  enabled     = var.deploy
  name        = local.install[1].name
  ssh_host    = local.install[1].ssh_host
  ssh         = var.ssh
  install     = var.install
  config      = local.install[1].config
  config_hash = local.install[1].config_hash
  admin       = local.install[1].admin
  binary_file = var.binary_file
  unit_file   = local.unit_file
  certs_dir   = var.certs_dir
}

module "install_2" {
  source     = "../gateway-host"
  count      = length(var.gateways) > 2 ? 1 : 0
  depends_on = [module.install_1]

  enabled     = var.deploy
  name        = local.install[2].name
  ssh_host    = local.install[2].ssh_host
  ssh         = var.ssh
  install     = var.install
  config      = local.install[2].config
  config_hash = local.install[2].config_hash
  admin       = local.install[2].admin
  binary_file = var.binary_file
  unit_file   = local.unit_file
  certs_dir   = var.certs_dir
}

module "install_3" {
  source     = "../gateway-host"
  count      = length(var.gateways) > 3 ? 1 : 0
  depends_on = [module.install_2]

  enabled     = var.deploy
  name        = local.install[3].name
  ssh_host    = local.install[3].ssh_host
  ssh         = var.ssh
  install     = var.install
  config      = local.install[3].config
  config_hash = local.install[3].config_hash
  admin       = local.install[3].admin
  binary_file = var.binary_file
  unit_file   = local.unit_file
  certs_dir   = var.certs_dir
}

module "install_4" {
  source     = "../gateway-host"
  count      = length(var.gateways) > 4 ? 1 : 0
  depends_on = [module.install_3]

  enabled     = var.deploy
  name        = local.install[4].name
  ssh_host    = local.install[4].ssh_host
  ssh         = var.ssh
  install     = var.install
  config      = local.install[4].config
  config_hash = local.install[4].config_hash
  admin       = local.install[4].admin
  binary_file = var.binary_file
  unit_file   = local.unit_file
  certs_dir   = var.certs_dir
}

module "install_5" {
  source     = "../gateway-host"
  count      = length(var.gateways) > 5 ? 1 : 0
  depends_on = [module.install_4]

  enabled     = var.deploy
  name        = local.install[5].name
  ssh_host    = local.install[5].ssh_host
  ssh         = var.ssh
  install     = var.install
  config      = local.install[5].config
  config_hash = local.install[5].config_hash
  admin       = local.install[5].admin
  binary_file = var.binary_file
  unit_file   = local.unit_file
  certs_dir   = var.certs_dir
}

module "install_6" {
  source     = "../gateway-host"
  count      = length(var.gateways) > 6 ? 1 : 0
  depends_on = [module.install_5]

  enabled     = var.deploy
  name        = local.install[6].name
  ssh_host    = local.install[6].ssh_host
  ssh         = var.ssh
  install     = var.install
  config      = local.install[6].config
  config_hash = local.install[6].config_hash
  admin       = local.install[6].admin
  binary_file = var.binary_file
  unit_file   = local.unit_file
  certs_dir   = var.certs_dir
}

module "install_7" {
  source     = "../gateway-host"
  count      = length(var.gateways) > 7 ? 1 : 0
  depends_on = [module.install_6]

  enabled     = var.deploy
  name        = local.install[7].name
  ssh_host    = local.install[7].ssh_host
  ssh         = var.ssh
  install     = var.install
  config      = local.install[7].config
  config_hash = local.install[7].config_hash
  admin       = local.install[7].admin
  binary_file = var.binary_file
  unit_file   = local.unit_file
  certs_dir   = var.certs_dir
}

module "install_8" {
  source     = "../gateway-host"
  count      = length(var.gateways) > 8 ? 1 : 0
  depends_on = [module.install_7]

  enabled     = var.deploy
  name        = local.install[8].name
  ssh_host    = local.install[8].ssh_host
  ssh         = var.ssh
  install     = var.install
  config      = local.install[8].config
  config_hash = local.install[8].config_hash
  admin       = local.install[8].admin
  binary_file = var.binary_file
  unit_file   = local.unit_file
  certs_dir   = var.certs_dir
}

module "install_9" {
  source     = "../gateway-host"
  count      = length(var.gateways) > 9 ? 1 : 0
  depends_on = [module.install_8]

  enabled     = var.deploy
  name        = local.install[9].name
  ssh_host    = local.install[9].ssh_host
  ssh         = var.ssh
  install     = var.install
  config      = local.install[9].config
  config_hash = local.install[9].config_hash
  admin       = local.install[9].admin
  binary_file = var.binary_file
  unit_file   = local.unit_file
  certs_dir   = var.certs_dir
}

module "install_10" {
  source     = "../gateway-host"
  count      = length(var.gateways) > 10 ? 1 : 0
  depends_on = [module.install_9]

  enabled     = var.deploy
  name        = local.install[10].name
  ssh_host    = local.install[10].ssh_host
  ssh         = var.ssh
  install     = var.install
  config      = local.install[10].config
  config_hash = local.install[10].config_hash
  admin       = local.install[10].admin
  binary_file = var.binary_file
  unit_file   = local.unit_file
  certs_dir   = var.certs_dir
}

module "install_11" {
  source     = "../gateway-host"
  count      = length(var.gateways) > 11 ? 1 : 0
  depends_on = [module.install_10]

  enabled     = var.deploy
  name        = local.install[11].name
  ssh_host    = local.install[11].ssh_host
  ssh         = var.ssh
  install     = var.install
  config      = local.install[11].config
  config_hash = local.install[11].config_hash
  admin       = local.install[11].admin
  binary_file = var.binary_file
  unit_file   = local.unit_file
  certs_dir   = var.certs_dir
}

module "install_12" {
  source     = "../gateway-host"
  count      = length(var.gateways) > 12 ? 1 : 0
  depends_on = [module.install_11]

  enabled     = var.deploy
  name        = local.install[12].name
  ssh_host    = local.install[12].ssh_host
  ssh         = var.ssh
  install     = var.install
  config      = local.install[12].config
  config_hash = local.install[12].config_hash
  admin       = local.install[12].admin
  binary_file = var.binary_file
  unit_file   = local.unit_file
  certs_dir   = var.certs_dir
}

module "install_13" {
  source     = "../gateway-host"
  count      = length(var.gateways) > 13 ? 1 : 0
  depends_on = [module.install_12]

  enabled     = var.deploy
  name        = local.install[13].name
  ssh_host    = local.install[13].ssh_host
  ssh         = var.ssh
  install     = var.install
  config      = local.install[13].config
  config_hash = local.install[13].config_hash
  admin       = local.install[13].admin
  binary_file = var.binary_file
  unit_file   = local.unit_file
  certs_dir   = var.certs_dir
}

module "install_14" {
  source     = "../gateway-host"
  count      = length(var.gateways) > 14 ? 1 : 0
  depends_on = [module.install_13]

  enabled     = var.deploy
  name        = local.install[14].name
  ssh_host    = local.install[14].ssh_host
  ssh         = var.ssh
  install     = var.install
  config      = local.install[14].config
  config_hash = local.install[14].config_hash
  admin       = local.install[14].admin
  binary_file = var.binary_file
  unit_file   = local.unit_file
  certs_dir   = var.certs_dir
}

module "install_15" {
  source     = "../gateway-host"
  count      = length(var.gateways) > 15 ? 1 : 0
  depends_on = [module.install_14]

  enabled     = var.deploy
  name        = local.install[15].name
  ssh_host    = local.install[15].ssh_host
  ssh         = var.ssh
  install     = var.install
  config      = local.install[15].config
  config_hash = local.install[15].config_hash
  admin       = local.install[15].admin
  binary_file = var.binary_file
  unit_file   = local.unit_file
  certs_dir   = var.certs_dir
}
