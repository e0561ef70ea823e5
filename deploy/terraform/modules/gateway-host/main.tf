locals {
  sudo    = var.ssh.user == "root" ? "" : "sudo "
  as_user = var.ssh.user == "root" ? "runuser -u \"$U\" --" : "sudo -u \"$U\""
  staging = "/tmp/mrgw-deploy-${var.name}"
  dir     = var.install.config_dir
  # The readiness check runs on the host itself: a wildcard admin address is
  # asked on loopback.
  ready_url = var.admin == "" ? "" : "http://${replace(replace(var.admin, "0.0.0.0:", "127.0.0.1:"), "[::]:", "[::1]:")}/readyz"

  # File digests are read only when installing: a render-only run needs no
  # binary and no certificates.
  triggers = var.enabled ? {
    config = var.config_hash
    binary = filesha256(var.binary_file)
    unit   = filesha256(var.unit_file)
    ca     = filesha256("${var.certs_dir}/ca.pem")
    cert   = filesha256("${var.certs_dir}/${var.name}.pem")
    key    = filesha256("${var.certs_dir}/${var.name}-key.pem")
  } : {}
}

resource "terraform_data" "install" {
  count            = var.enabled ? 1 : 0
  triggers_replace = local.triggers

  connection {
    type         = "ssh"
    host         = var.ssh_host
    port         = var.ssh.port
    user         = var.ssh.user
    private_key  = var.ssh.private_key_file == null ? null : file(var.ssh.private_key_file)
    agent        = var.ssh.private_key_file == null
    host_key     = var.ssh.host_key
    bastion_host = var.ssh.bastion_host
    bastion_user = var.ssh.bastion_user
    timeout      = var.ssh.timeout
  }

  # A private staging directory for the uploads.
  provisioner "remote-exec" {
    inline = [
      "set -eu",
      "rm -rf '${local.staging}' && mkdir -m 0700 '${local.staging}'",
    ]
  }

  provisioner "file" {
    source      = var.binary_file
    destination = "${local.staging}/mrgw"
  }
  provisioner "file" {
    source      = var.unit_file
    destination = "${local.staging}/mrgw.service"
  }
  provisioner "file" {
    source      = "${path.module}/../../../sysctl/60-mrgw.conf"
    destination = "${local.staging}/60-mrgw.conf"
  }
  provisioner "file" {
    content     = var.config
    destination = "${local.staging}/mrgw.yaml"
  }
  provisioner "file" {
    source      = "${var.certs_dir}/ca.pem"
    destination = "${local.staging}/ca.pem"
  }
  provisioner "file" {
    source      = "${var.certs_dir}/${var.name}.pem"
    destination = "${local.staging}/cert.pem"
  }
  provisioner "file" {
    source      = "${var.certs_dir}/${var.name}-key.pem"
    destination = "${local.staging}/key.pem"
  }

  # Install, check the configuration as the service user, restart, wait for
  # readiness. A configuration that fails the check leaves the running
  # gateway untouched.
  provisioner "remote-exec" {
    inline = [
      "set -eu",
      "S='${local.staging}'; D='${local.dir}'; U='${var.install.user}'",
      "id -u \"$U\" >/dev/null 2>&1 || ${local.sudo}useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \"$U\"",
      "${local.sudo}install -d -o root -g \"$U\" -m 0750 \"$D\" \"$D/certs\" \"$D/next\" \"$D/next/certs\"",
      "${local.sudo}install -o root -g \"$U\" -m 0640 \"$S/mrgw.yaml\" \"$D/next/mrgw.yaml\"",
      "${local.sudo}install -o root -g \"$U\" -m 0644 \"$S/ca.pem\" \"$D/next/certs/ca.pem\"",
      "${local.sudo}install -o root -g \"$U\" -m 0644 \"$S/cert.pem\" \"$D/next/certs/${var.name}.pem\"",
      "${local.sudo}install -o root -g \"$U\" -m 0640 \"$S/key.pem\" \"$D/next/certs/${var.name}-key.pem\"",
      "${local.sudo}install -o root -g root -m 0755 \"$S/mrgw\" '${var.install.binary}.next'",
      "${local.as_user} '${var.install.binary}.next' config check \"$D/next/mrgw.yaml\" || { echo 'mrgw config check failed: nothing changed on this host' >&2; exit 1; }",
      "for f in ca.pem '${var.name}.pem' '${var.name}-key.pem'; do ${local.sudo}mv -f \"$D/next/certs/$f\" \"$D/certs/$f\"; done",
      "${local.sudo}mv -f \"$D/next/mrgw.yaml\" \"$D/mrgw.yaml\"",
      "${local.sudo}mv -f '${var.install.binary}.next' '${var.install.binary}'",
      "${local.sudo}install -o root -g root -m 0644 \"$S/mrgw.service\" /etc/systemd/system/mrgw.service",
      "${local.sudo}install -o root -g root -m 0644 \"$S/60-mrgw.conf\" /etc/sysctl.d/60-mrgw.conf",
      "${local.sudo}sysctl -q -p /etc/sysctl.d/60-mrgw.conf || echo 'mrgw: could not apply /etc/sysctl.d/60-mrgw.conf (a container?): socket buffers stay capped' >&2",
      "rm -rf \"$S\"",
      "${local.sudo}systemctl daemon-reload",
      "${local.sudo}systemctl enable mrgw.service",
      "${local.sudo}systemctl restart mrgw.service",
      local.ready_url == "" ? "sleep 5; ${local.sudo}systemctl is-active --quiet mrgw.service" : "for i in $(seq ${var.install.ready_timeout}); do curl -fsS -o /dev/null '${local.ready_url}' && exit 0; sleep 1; done; echo 'mrgw not ready after ${var.install.ready_timeout}s' >&2; ${local.sudo}journalctl -u mrgw.service -n 50 --no-pager >&2; exit 1",
    ]
  }
}
