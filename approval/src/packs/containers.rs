//! The `containers` pack: Docker, Podman, Kubernetes and Helm.

use super::{RuleSpec, Severity, command, command_unless};

use Severity::Dangerous;

pub const RULES: &[RuleSpec] = &[
    command(
        "container-mass-delete",
        Dangerous,
        "deleting containers, images, volumes or networks in bulk",
        &["docker", "podman", "nerdctl"],
        r"(?:^|\s)(?:system|volume|image|container|network|builder|buildx)\s+(?:prune|rm)\b|^system\s+reset\b|^(?:rm|rmi)\s+(?:.*\s)?(?:\$\(|-a\b|--all\b)|^volume\s+rm\b|^compose\s+down\s.*(?:-v|--volumes)\b|^(?:rm|rmi|container\s+rm|image\s+rm)\s+(?:.*\s)?(?:-\w*f\w*|--force)(?:\s|$)",
        &[
            "docker system prune -af",
            "docker rm -f $(docker ps -aq)",
            "docker volume rm pgdata",
            "docker compose down -v",
            "podman system reset",
            "docker image prune -a",
            "docker rm -f web",
            "docker rmi --force image",
        ],
        &[
            "docker ps -a",
            "docker rm web-1",
            "docker compose down",
            "docker images",
        ],
    ),
    command(
        "container-host-escape",
        Dangerous,
        "running a container with the host's root, devices or PID namespace",
        &["docker", "podman", "nerdctl"],
        r"^run\b.*(?:--privileged|-v\s+/:/|--volume[=\s]/:/|--pid[=\s]host|--net[=\s]host.*--privileged|-v\s+/var/run/docker\.sock)",
        &[
            "docker run --privileged -it ubuntu",
            "docker run -v /:/host alpine chroot /host",
            "docker run --pid=host alpine",
        ],
        &[
            "docker run --rm -v $PWD:/src alpine ls /src",
            "docker run -it ubuntu bash",
        ],
    ),
    command_unless(
        "kubectl-delete",
        Dangerous,
        "deleting Kubernetes resources",
        &["kubectl", "oc", "k", "kubecolor", "microk8s.kubectl"],
        r"^(?:-\S+\s+(?:\S+\s+)?)*(?:delete|drain|replace\s+--force)\b|^(?:-\S+\s+)*scale\b.*--replicas[=\s]0\b|^(?:-\S+\s+)*apply\b.*--prune\b",
        r"--dry-run(?:=client|=server|\s|$)",
        &[
            "kubectl delete pvc --all",
            "kubectl delete namespace prod",
            "kubectl -n prod delete deploy web",
            "kubectl drain node-1 --ignore-daemonsets",
            "kubectl scale deploy web --replicas=0",
            "oc delete project x",
        ],
        &[
            "kubectl get pods",
            "kubectl delete pod web --dry-run=client",
            "kubectl describe node n",
        ],
    ),
    command(
        "helm-uninstall",
        Dangerous,
        "uninstalling Helm releases",
        &["helm"],
        r"^(?:-\S+\s+(?:\S+\s+)?)*(?:uninstall|delete|del|un)\b",
        &["helm uninstall web", "helm -n prod delete api"],
        &["helm list", "helm upgrade --install web ./chart"],
    ),
    command(
        "cluster-delete",
        Dangerous,
        "deleting a whole cluster",
        &[
            "kind",
            "minikube",
            "k3d",
            "eksctl",
            "kops",
            "talosctl",
            "k3s-uninstall.sh",
            "rke",
        ],
        r"(?:^|\s)(?:delete|destroy|reset|remove)(?:\s|$)",
        &[
            "kind delete cluster",
            "eksctl delete cluster --name prod",
            "minikube delete --all",
        ],
        &["kind get clusters", "minikube status"],
    ),
];
