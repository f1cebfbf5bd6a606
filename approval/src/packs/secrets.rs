//! The `secrets` pack: deleting secrets, or printing them where a transcript keeps them.

use super::{RuleSpec, Severity, command};

use Severity::Dangerous;

pub const RULES: &[RuleSpec] = &[
    command(
        "vault-delete",
        Dangerous,
        "deleting or destroying secrets in Vault, or disabling its engines",
        &["vault", "bao"],
        r"(?:^|\s)(?:delete|destroy|metadata\s+delete|disable|revoke|seal|operator\s+(?:seal|step-down|raft\s+remove-peer))(?:\s|$)",
        &[
            "vault kv metadata delete secret/app",
            "vault kv destroy -versions=1 secret/x",
            "vault secrets disable kv",
            "vault token revoke -mode=orphan x",
            "vault operator seal",
        ],
        &["vault kv get secret/app", "vault status"],
    ),
    command(
        "secret-manager-delete",
        Dangerous,
        "deleting secrets in a password manager or key store",
        &[
            "op",
            "bw",
            "pass",
            "gopass",
            "lpass",
            "doppler",
            "infisical",
            "sops",
            "security",
            "keyctl",
            "gpg",
            "gpg2",
            "age-keygen",
            "step",
            "kubeseal",
        ],
        r"(?:^|\s)(?:delete|rm|remove|purge|revoke|delete-keychain|delete-generic-password|delete-internet-password|delete-certificate|--delete-secret-keys|--delete-keys|--delete-secret-and-public-key|clear|unlink)(?:\s|$)",
        &[
            "op item delete login",
            "bw delete item 123",
            "pass rm -r work",
            "security delete-keychain login.keychain",
            "gpg --delete-secret-keys me@x",
        ],
        &["op item get login", "pass show work/x", "gpg --list-keys"],
    ),
    command(
        "cloud-secret-delete",
        Dangerous,
        "deleting secrets or keys in a cloud secret manager",
        &["aws", "gcloud", "az"],
        r"secretsmanager\s+(?:delete-secret|update-secret|put-secret-value|remove-regions-from-replication)|kms\s+(?:schedule-key-deletion|disable-key)|secrets\s+(?:delete|versions\s+destroy)|kms\s+keys\s+versions\s+destroy|keyvault\s+(?:delete|purge|secret\s+delete|key\s+delete)",
        &[
            "aws secretsmanager delete-secret --secret-id prod/db --force-delete-without-recovery",
            "gcloud secrets delete api-key",
            "az keyvault secret delete --vault-name v --name s",
            "aws kms schedule-key-deletion --key-id k",
        ],
        &[
            "aws secretsmanager get-secret-value --secret-id x",
            "gcloud secrets list",
        ],
    ),
    command(
        "kubernetes-secret-delete",
        Dangerous,
        "deleting or printing Kubernetes secrets",
        &["kubectl", "oc"],
        r"(?:^|\s)delete\s+(?:secrets?|sealedsecrets?)\b|get\s+secrets?\b.*(?:-o\s*(?:yaml|json|jsonpath)|--output)",
        &[
            "kubectl delete secret db-creds",
            "kubectl get secret db -o jsonpath='{.data.password}'",
        ],
        &["kubectl get secrets", "kubectl describe secret db"],
    ),
    command(
        "ssh-known-host-remove",
        Dangerous,
        "removing host keys from known_hosts",
        &["ssh-keygen"],
        r"(?:^|\s)-R(?:\s|$)",
        &[
            "ssh-keygen -R hostname",
            "ssh-keygen -f ~/.ssh/known_hosts -R 192.168.1.1",
        ],
        &["ssh-keygen -t ed25519 -f key", "ssh-keygen -lf key.pub"],
    ),
    command(
        "gh-secret-delete",
        Dangerous,
        "deleting CI secrets",
        &["gh", "glab"],
        r"^(?:secret|variable)\s+(?:delete|remove|rm)\b",
        &["gh secret delete TOKEN", "glab variable delete KEY"],
        &["gh secret list"],
    ),
];
