"""Flower faults, beyond CI's time for the Flower tests (tests/test_flower.py), run when FL_FLOWER_FAULTS=1 is set:
SCAFFOLD stopped after 2 rounds, a node killed (its c_i stays on its disk) and restarted, the run resumed
from the server's checkpoint — still equal to ``fit`` bit for bit (~60 s on 2 shared cores); a SuperNode
killed during a run (~60 s); a run over TLS with certificates made here (~45 s). Each starts its own
federation."""
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("flwr", reason="Flower is an extra: pip install '.[flower]' (make test installs it)")
if os.environ.get("FL_FLOWER_FAULTS") != "1":
    pytest.skip("set FL_FLOWER_FAULTS=1 for node restarts and kills and a run over TLS (~3 min)",
                allow_module_level=True)

from fl_lightning.cli import main  # noqa: E402
from fl_lightning.deploy.local import LocalFederation  # noqa: E402
from test_flower import CONFIG, NODES, options, rows, same  # noqa: E402


def test_a_node_restarted_between_rounds_and_a_resumed_server_change_no_number(tmp_path, monkeypatch):
    """SCAFFOLD's c_i live on the nodes: node 0 goes down after round 2 and comes back; the server resumes
    from its checkpoint (``--ckpt_path last``) for round 3; every metric equals an uninterrupted ``fit``'s."""
    (tmp_path / "tiny.yaml").write_text(CONFIG)
    monkeypatch.chdir(tmp_path)
    with LocalFederation(NODES, str(tmp_path), threads=1) as federation:
        flower = options(federation, "scaffold", "flower")
        assert federation.run(flower + ["--trainer.max_epochs", "2"]) == 0
        federation.stop_node(0)  # its c_0 stays on its disk
        federation.start_node(0)
        assert federation.run(flower + ["--ckpt_path", "last"]) == 0
    assert main(["fit", *options(federation, "scaffold", "sim")]) == 0
    deployed, simulated = rows("flower"), rows("sim")
    assert len(deployed) == len(simulated) == 3
    for number, (got, want) in enumerate(zip(deployed, simulated), start=1):
        assert same(got, want, stopped=number == 2), (number, got, want)


def test_a_killed_node_is_a_client_that_did_not_report_and_rejoins(tmp_path, monkeypatch):
    """Node 0's machine goes down while it answers round 1: the round completes with the 2 clients that
    reported (as model.client_dropout does in a simulation); the node comes back under a new node id, joins
    again (keeping what is on its disk) and reports in the last round."""
    (tmp_path / "tiny.yaml").write_text(CONFIG)
    with LocalFederation(NODES, str(tmp_path), threads=1) as federation:
        log = os.path.join(federation.logs, "worker0.log")
        with ThreadPoolExecutor(1) as pool:
            run = pool.submit(federation.run, options(federation, "scaffold", "killed")
                              + ["--trainer.max_epochs", "5"], round_timeout=5.0)
            while not os.path.exists(log) or "round 1: client 0" not in open(log).read():
                assert not run.done(), "the run ended before node 0 trained round 1"
                time.sleep(0.02)
            federation.stop_node(0)
            federation.start_node(0)
            assert run.result() == 0
    reported = [(r["comm/clients_reported"], r["comm/clients_dropped"]) for r in rows(str(tmp_path / "killed"))]
    assert len(reported) == 5 and reported[0] == ("2.0", "1.0") and reported[-1] == ("3.0", "0.0")
    assert "joined run" in open(log).read().split("round 1: client 0")[-1]  # the restarted node joined again


def certificates(folder) -> dict:
    """A CA and a SuperLink certificate for 127.0.0.1 signed by it, made here (PEM files)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def certificate(subject, issuer, public_key, signing_key, ca: bool, names=()):
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(list(names)), critical=False)
        return builder.sign(signing_key, hashes.SHA256())

    def name(text):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = certificate(name("fl-lightning test CA"), name("fl-lightning test CA"), ca_key.public_key(), ca_key, True)
    server = certificate(name("127.0.0.1"), ca.subject, key.public_key(), ca_key, False,
                         [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    paths = {"ca": folder / "ca.pem", "cert": folder / "server.pem", "key": folder / "server.key"}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    return {k: str(v) for k, v in paths.items()}


def test_a_run_over_tls(tmp_path, monkeypatch):
    """The SuperLink serves HTTPS with a certificate made here; the SuperNodes and flwr check it against the CA."""
    (tmp_path / "tiny.yaml").write_text(CONFIG)
    monkeypatch.chdir(tmp_path)
    with LocalFederation(NODES, str(tmp_path), threads=1, tls=certificates(tmp_path)) as federation:
        assert federation.run(options(federation, "fedavg", "tls") + ["--trainer.max_epochs", "1"]) == 0
    (row,) = rows("tls")
    assert (row["comm/clients_reported"], row["comm/clients_dropped"]) == ("3.0", "0.0")
