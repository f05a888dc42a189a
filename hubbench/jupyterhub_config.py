# The jupyterhub_config.py of dtfkit's classroom bench and hub tests, and a starting point for a class's hub.
#
# Each student is a real system user; their server is a local process (LimitedSpawner: LocalProcessSpawner
# plus a memory and process cap per student, through cgroups). The bench sets the DTFKIT_HUB_* variables
# below; on a real hub, replace them with your values (and DummyAuthenticator with your login: PAM, OAuth, ...).
import os
import sys

c = get_config()  # type: ignore[name-defined]  # noqa: F821 (JupyterHub defines it when it reads this file)

state = os.environ["DTFKIT_HUB_STATE"]  # a private folder for the hub's database, cookie secret and logs
c.JupyterHub.bind_url = f"http://127.0.0.1:{os.environ['DTFKIT_HUB_PORT']}"
c.JupyterHub.hub_port = int(os.environ["DTFKIT_HUB_API_PORT"])
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{os.environ['DTFKIT_HUB_PROXY_API_PORT']}"
c.ConfigurableHTTPProxy.command = [os.environ.get("DTFKIT_HUB_PROXY", "configurable-http-proxy")]
c.ConfigurableHTTPProxy.should_start = True
c.JupyterHub.db_url = f"sqlite:///{state}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{state}/jupyterhub_cookie_secret"
c.JupyterHub.pid_file = f"{state}/jupyterhub.pid"
c.JupyterHub.cleanup_servers = True  # a stopped hub stops every student's server
c.JupyterHub.cleanup_proxy = True

# Login: the bench's students have a shared password; a class uses its own authenticator.
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = os.environ["DTFKIT_HUB_PASSWORD"]
c.Authenticator.allowed_users = set(os.environ["DTFKIT_HUB_USERS"].split(","))
c.Authenticator.admin_users = set()

# The bench drives the hub as a service with its own token (user listing, stopping servers).
c.JupyterHub.services = [{"name": "dtfkit-bench", "api_token": os.environ["DTFKIT_HUB_SERVICE_TOKEN"]}]
c.JupyterHub.load_roles = [
    {
        "name": "dtfkit-bench",
        "scopes": ["admin:users", "admin:servers", "list:users", "read:users", "tokens"],
        "services": ["dtfkit-bench"],
    }
]

# One server per student, as that student, with a memory and a process cap (hubbench/spawner.py).
c.JupyterHub.spawner_class = "hubbench.spawner.LimitedSpawner"
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.mem_limit = os.environ.get("DTFKIT_HUB_MEM_LIMIT", "3G")
# processes + threads per student: a TensorFlow task runs ~100 threads on 2 cores, a student up to 9 tasks at once
c.LimitedSpawner.max_pids = int(os.environ.get("DTFKIT_HUB_MAX_PIDS", "4096"))
c.Spawner.start_timeout = 300  # a class starting at once on a small machine is slow to answer
c.Spawner.http_timeout = 300
c.JupyterHub.concurrent_spawn_limit = 0  # a lab: everyone starts within the same minute
c.Spawner.environment = {
    # the task zygote: "0" starts every task as a fresh interpreter (each importing TensorFlow)
    "DTFKIT_ZYGOTE": os.environ.get("DTFKIT_HUB_ZYGOTE", "1"),
    "PYTHONPATH": os.environ.get("DTFKIT_HUB_PYTHONPATH", ""),
}
if os.environ.get("DTFKIT_HUB_LANG"):  # a class in another language: dtfkit's words in the students' kernels
    c.Spawner.environment["DTFKIT_LANG"] = os.environ["DTFKIT_HUB_LANG"]
c.Spawner.env_keep = ["PATH", "LANG", "LC_ALL", "TF_CPP_MIN_LOG_LEVEL", "DTFKIT_CLASSROOM"]
