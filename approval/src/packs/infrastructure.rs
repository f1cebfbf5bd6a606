//! The `infrastructure` pack: tools that create and destroy whole environments.

use super::{RuleSpec, Severity, command};

use Severity::Dangerous;

pub const RULES: &[RuleSpec] = &[
    command(
        "terraform-destroy",
        Dangerous,
        "destroying or replacing infrastructure (Terraform, OpenTofu, Terragrunt)",
        &["terraform", "tofu", "terragrunt", "tf"],
        r"(?:^|\s)(?:destroy|run-all\s+destroy)(?:\s|$)|(?:^|\s)-destroy\b|^(?:-\S+\s+)*apply\b.*(?:-auto-approve|-replace)|^(?:-\S+\s+)*state\s+(?:rm|push)\b|^(?:-\S+\s+)*workspace\s+delete\b|^(?:-\S+\s+)*taint\b",
        &[
            "terraform destroy -auto-approve",
            "terraform apply -destroy",
            "terraform apply -auto-approve",
            "tofu state rm aws_instance.web",
            "terragrunt run-all destroy",
        ],
        &[
            "terraform plan",
            "terraform init",
            "terraform apply",
            "terraform output",
        ],
    ),
    command(
        "pulumi-destroy",
        Dangerous,
        "destroying stacks (Pulumi, CDK, Serverless, SAM, Copilot)",
        &[
            "pulumi",
            "cdk",
            "cdktf",
            "serverless",
            "sls",
            "sam",
            "copilot",
            "sst",
            "amplify",
            "cloudformation",
        ],
        r"(?:^|\s)(?:destroy|remove|delete|rm)(?:\s|$)|^(?:-\S+\s+)*up\b.*(?:--yes|-y)\b.*--replace|^(?:-\S+\s+)*stack\s+rm\b",
        &[
            "pulumi destroy --yes",
            "pulumi stack rm prod",
            "cdk destroy --force",
            "serverless remove",
            "sam delete",
        ],
        &["pulumi preview", "cdk diff", "pulumi up"],
    ),
    command(
        "vm-destroy",
        Dangerous,
        "destroying virtual machines (Vagrant, libvirt, Multipass, Packer)",
        &[
            "vagrant",
            "virsh",
            "multipass",
            "VBoxManage",
            "vboxmanage",
            "qm",
            "pct",
            "lxc",
            "incus",
        ],
        r"(?:^|\s)(?:destroy|undefine|delete|unregistervm|purge|rm)(?:\s|$)",
        &[
            "vagrant destroy -f",
            "virsh undefine vm1 --remove-all-storage",
            "multipass delete --purge vm",
            "lxc delete web --force",
        ],
        &["vagrant up", "virsh list --all", "lxc list"],
    ),
    command(
        "config-management-destroy",
        Dangerous,
        "running destructive ad-hoc commands across many machines",
        &["ansible", "salt", "pdsh", "clush", "parallel-ssh", "pssh"],
        r"rm\s+-[a-z]*r|state=absent|shutdown|reboot|mkfs|dd\s+if=",
        &[
            "ansible all -m shell -a 'rm -rf /var/www'",
            "ansible web -m file -a 'path=/etc state=absent'",
            "salt '*' cmd.run 'reboot'",
        ],
        &["ansible all -m ping", "salt '*' test.ping"],
    ),
    command(
        "service-mesh-delete",
        Dangerous,
        "deleting jobs, keys or services in a cluster scheduler",
        &["nomad", "consul"],
        r"(?:^|\s)(?:stop\s+.*-purge|delete|deregister|destroy)(?:\s|$)|-recurse",
        &[
            "nomad job stop -purge web",
            "consul kv delete -recurse app/",
        ],
        &["nomad job status", "consul members"],
    ),
];
