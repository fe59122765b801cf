"""A leader whose path to PostgreSQL goes silent without a FIN or an RST (a proxy that
accepts bytes and delivers nothing, tests/tcp_proxy.py): the old leader stops acting and
a standby leads, within the bounds its settings give, in that order (real PostgreSQL)."""

from __future__ import annotations

from app.dispatch.leader import session_options
from tests.tcp_proxy import leader_blackhole_round

# small settings for the test: a 3 s lease, checks answered within 1 s
OPTIONS = session_options(keepalive_idle_s=1, keepalive_interval_s=1, keepalive_count=2,
                          user_timeout_s=2, lease_s=3)
CHECK_TIMEOUT_S = 1.0


def test_a_silent_leader_stops_acting_before_the_standby_leads(db_url):
    """Before: the old leader's check waited forever on a connection TCP still called
    alive (the proxy's kernel acknowledges every byte), and PostgreSQL kept its lock, so
    no standby ever led. Now its check gives up after check_timeout_s and it stops;
    PostgreSQL ends its session after the lease (idle_session_timeout) and the standby
    takes the lock."""
    stopped, taken = leader_blackhole_round(db_url, OPTIONS, CHECK_TIMEOUT_S, timeout_s=60)
    assert stopped is not None, "the cut-off leader never stopped acting"
    assert taken is not None, "no standby led: PostgreSQL kept the silent leader's lock"
    assert stopped <= taken, "two leaders at once: the standby led before the old one stopped"
