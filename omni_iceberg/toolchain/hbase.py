"""A standalone HBase (master, region server and ZooKeeper in one JVM) and its Thrift server.

No HBase server installs from Debian or PyPI here, so the jars come from Maven Central:
the ``hbase-thrift`` artifact with its full dependency tree, pinned in :data:`_LOCK`
(one ``group:artifact:version[:classifier]`` per line, the exact set that
``mvn dependency:get -Dartifact=org.apache.hbase:hbase-thrift:2.6.1`` resolved on
2026-11-30). Each jar is fetched with :func:`~omni_iceberg.toolchain.downloads.download_verified`
(checked against the ``.sha1`` Maven Central publishes, renamed into place only when
it matches), so no Maven install is needed at run time and a second call does no
network I/O.

The classpath trap (see ``TOOLCHAIN.md``): Hadoop 2's dependency tree drags in the old
``servlet-api`` 2.5, ``jsp-api`` 2.1, the ``org.mortbay`` Jetty 6 jars and Jersey 1.x.
With them on its classpath the Thrift server dies at start with a ``NoSuchMethodError``
on ``javax.servlet``: HBase 2.x uses its own shaded Jetty 9 and needs the Servlet 3.1
API. Those jars are left out of :data:`_LOCK` altogether (standalone HBase never
needs them), so every classpath built from the cache is safe.

Example::

    >>> from omni_iceberg.toolchain.hbase import ensure_hbase_jars, write_hbase_site
    >>> jars = ensure_hbase_jars()                      # doctest: +SKIP
    >>> conf = write_hbase_site("/tmp/hb/conf", "/tmp/hb/data", zookeeper_port=2181)  # doctest: +SKIP
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from xml.sax.saxutils import escape

from catalog_ext.errors import ConfigError
from omni_iceberg.toolchain.maven_lock import ensure_locked_jars

HBASE_VERSION = "2.6.1"
_FIX = ("run `python -m omni_iceberg.toolchain.hbase` where Maven Central is reachable, "
        "or point OMNI_CACHE at a folder whose hbase-" + HBASE_VERSION + "/jars holds them")

#: The Thrift server's main class (Thrift 1: the protocol ``happybase`` speaks).
THRIFT_MAIN = "org.apache.hadoop.hbase.thrift.ThriftServer"
MASTER_MAIN = "org.apache.hadoop.hbase.master.HMaster"
REGION_SPLITTER_MAIN = "org.apache.hadoop.hbase.util.RegionSplitter"

#: JVM flags for a 2-core machine: small heap, serial collector, C1 only (start-up
#: dominates a test JVM's life). The --add-opens let HBase 2.6 reach JDK internals on 17+.
JVM_FLAGS: tuple[str, ...] = (
    "-Xmx768m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true",
    "--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED", "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
    "-Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true",
)

_LOCK = """
aopalliance:aopalliance:1.0
asm:asm:3.1
asm:asm:3.3.1
ch.qos.reload4j:reload4j:1.2.18.3
classworlds:classworlds:1.1
com.cedarsoftware:java-util:1.9.0
com.cedarsoftware:json-io:2.5.1
com.codahale.metrics:metrics-core:3.0.1
com.fasterxml.jackson.core:jackson-annotations:2.9.10
com.fasterxml.jackson.core:jackson-core:2.9.10
com.fasterxml.jackson.core:jackson-databind:2.9.10.7
com.fasterxml.woodstox:woodstox-core:5.3.0
com.github.ben-manes.caffeine:caffeine:2.8.1
com.github.stephenc.jcip:jcip-annotations:1.0-1
com.google.code.findbugs:jsr305:3.0.2
com.google.code.gson:gson:2.2.4
com.google.errorprone:error_prone_annotations:2.32.0
com.google.guava:guava:11.0.2
com.google.inject.extensions:guice-servlet:3.0
com.google.inject:guice:3.0
com.google.protobuf:protobuf-java:2.5.0
com.jamesmurty.utils:java-xmlbuilder:0.4
com.jcraft:jsch:0.1.55
com.lmax:disruptor:3.4.4
com.microsoft.sqlserver:mssql-jdbc:6.2.1.jre7
com.nimbusds:nimbus-jose-jwt:7.9
com.squareup.okhttp:okhttp:2.7.5
com.squareup.okio:okio:1.6.0
com.sun.xml.bind:jaxb-impl:2.2.3-1
com.thoughtworks.paranamer:paranamer:2.3
com.zaxxer:HikariCP-java7:2.4.12
commons-beanutils:commons-beanutils:1.7.0
commons-beanutils:commons-beanutils:1.9.4
commons-cli:commons-cli:1.0
commons-cli:commons-cli:1.2
commons-codec:commons-codec:1.15
commons-collections:commons-collections:3.2.1
commons-collections:commons-collections:3.2.2
commons-configuration:commons-configuration:1.6
commons-daemon:commons-daemon:1.0.13
commons-digester:commons-digester:1.6
commons-digester:commons-digester:1.8
commons-io:commons-io:1.4
commons-io:commons-io:2.11.0
commons-lang:commons-lang:2.6
commons-logging:commons-logging:1.0.4
commons-logging:commons-logging:1.1.3
commons-net:commons-net:3.1
commons-validator:commons-validator:1.2.0
de.ruedigermoeller:fst:2.50
io.dropwizard.metrics:metrics-core:3.2.6
io.netty:netty-all:4.1.50.Final
io.netty:netty-buffer:4.1.105.Final
io.netty:netty-codec:4.1.105.Final
io.netty:netty-common:4.1.105.Final
io.netty:netty-handler:4.1.105.Final
io.netty:netty-resolver:4.1.105.Final
io.netty:netty-transport-classes-epoll:4.1.105.Final
io.netty:netty-transport-native-epoll:4.1.105.Final
io.netty:netty-transport-native-unix-common:4.1.105.Final
io.netty:netty-transport:4.1.105.Final
io.netty:netty:3.10.6.Final
io.opentelemetry:opentelemetry-api:1.15.0
io.opentelemetry:opentelemetry-context:1.15.0
io.opentelemetry:opentelemetry-semconv:1.15.0-alpha
jakarta.annotation:jakarta.annotation-api:1.3.5
jakarta.validation:jakarta.validation-api:2.0.2
javax.activation:javax.activation-api:1.2.0
javax.annotation:javax.annotation-api:1.2
javax.inject:javax.inject:1
javax.servlet:javax.servlet-api:3.1.0
javax.servlet.jsp:javax.servlet.jsp-api:2.3.1
javax.ws.rs:jsr311-api:1.1.1
javax.xml.bind:jaxb-api:2.3.1
junit:junit:3.8.1
net.java.dev.jets3t:jets3t:0.9.0
org.agrona:agrona:1.12.0
org.apache.avro:avro:1.7.7
org.apache.commons:commons-compress:1.21
org.apache.commons:commons-crypto:1.1.0
org.apache.commons:commons-csv:1.0
org.apache.commons:commons-lang3:3.9
org.apache.commons:commons-math3:3.6.1
org.apache.curator:curator-client:2.13.0
org.apache.curator:curator-framework:2.13.0
org.apache.curator:curator-recipes:2.13.0
org.apache.directory.api:api-asn1-api:1.0.0-M20
org.apache.directory.api:api-util:1.0.0-M20
org.apache.directory.server:apacheds-i18n:2.0.0-M15
org.apache.directory.server:apacheds-kerberos-codec:2.0.0-M15
org.apache.geronimo.specs:geronimo-jcache_1.0_spec:1.0-alpha-1
org.apache.hadoop:hadoop-annotations:2.10.2
org.apache.hadoop:hadoop-auth:2.10.2
org.apache.hadoop:hadoop-client:2.10.2
org.apache.hadoop:hadoop-common:2.10.2:tests
org.apache.hadoop:hadoop-common:2.10.2
org.apache.hadoop:hadoop-distcp:2.10.2
org.apache.hadoop:hadoop-hdfs-client:2.10.2
org.apache.hadoop:hadoop-hdfs:2.10.2:tests
org.apache.hadoop:hadoop-hdfs:2.10.2
org.apache.hadoop:hadoop-mapreduce-client-app:2.10.2
org.apache.hadoop:hadoop-mapreduce-client-common:2.10.2
org.apache.hadoop:hadoop-mapreduce-client-core:2.10.2
org.apache.hadoop:hadoop-mapreduce-client-hs:2.10.2
org.apache.hadoop:hadoop-mapreduce-client-jobclient:2.10.2:tests
org.apache.hadoop:hadoop-mapreduce-client-jobclient:2.10.2
org.apache.hadoop:hadoop-mapreduce-client-shuffle:2.10.2
org.apache.hadoop:hadoop-minicluster:2.10.2
org.apache.hadoop:hadoop-yarn-api:2.10.2
org.apache.hadoop:hadoop-yarn-client:2.10.2
org.apache.hadoop:hadoop-yarn-common:2.10.2
org.apache.hadoop:hadoop-yarn-registry:2.10.2
org.apache.hadoop:hadoop-yarn-server-applicationhistoryservice:2.10.2
org.apache.hadoop:hadoop-yarn-server-common:2.10.2
org.apache.hadoop:hadoop-yarn-server-nodemanager:2.10.2
org.apache.hadoop:hadoop-yarn-server-resourcemanager:2.10.2
org.apache.hadoop:hadoop-yarn-server-tests:2.10.2:tests
org.apache.hadoop:hadoop-yarn-server-timelineservice:2.10.2
org.apache.hadoop:hadoop-yarn-server-web-proxy:2.10.2
org.apache.hbase:hbase-asyncfs:2.6.1
org.apache.hbase:hbase-client:2.6.1
org.apache.hbase:hbase-common:2.6.1
org.apache.hbase:hbase-hadoop-compat:2.6.1
org.apache.hbase:hbase-hadoop2-compat:2.6.1
org.apache.hbase:hbase-http:2.6.1
org.apache.hbase:hbase-logging:2.6.1
org.apache.hbase:hbase-metrics-api:2.6.1
org.apache.hbase:hbase-metrics:2.6.1
org.apache.hbase:hbase-procedure:2.6.1
org.apache.hbase:hbase-protocol-shaded:2.6.1
org.apache.hbase:hbase-protocol:2.6.1
org.apache.hbase:hbase-replication:2.6.1
org.apache.hbase:hbase-server:2.6.1
org.apache.hbase:hbase-thrift:2.6.1
org.apache.hbase:hbase-zookeeper:2.6.1
org.apache.hbase.thirdparty:hbase-shaded-gson:4.1.9
org.apache.hbase.thirdparty:hbase-shaded-jersey:4.1.9
org.apache.hbase.thirdparty:hbase-shaded-jetty:4.1.9
org.apache.hbase.thirdparty:hbase-shaded-miscellaneous:4.1.9
org.apache.hbase.thirdparty:hbase-shaded-netty:4.1.9
org.apache.hbase.thirdparty:hbase-shaded-protobuf:4.1.9
org.apache.hbase.thirdparty:hbase-unsafe:4.1.9
org.apache.htrace:htrace-core4:4.1.0-incubating
org.apache.httpcomponents:httpclient:4.5.10
org.apache.httpcomponents:httpcore:4.4.12
org.apache.maven.doxia:doxia-core:1.0
org.apache.maven.doxia:doxia-decoration-model:1.0
org.apache.maven.doxia:doxia-module-apt:1.0
org.apache.maven.doxia:doxia-module-fml:1.0
org.apache.maven.doxia:doxia-module-xdoc:1.0
org.apache.maven.doxia:doxia-module-xhtml:1.0
org.apache.maven.doxia:doxia-sink-api:1.0
org.apache.maven.doxia:doxia-site-renderer:1.0
org.apache.maven:maven-artifact-manager:2.0.9
org.apache.maven:maven-artifact:2.0.9
org.apache.maven:maven-core:2.0.9
org.apache.maven:maven-error-diagnostics:2.0.9
org.apache.maven:maven-model:2.0.9
org.apache.maven:maven-monitor:2.0.9
org.apache.maven:maven-plugin-api:2.0.9
org.apache.maven:maven-plugin-descriptor:2.0.9
org.apache.maven:maven-plugin-parameter-documenter:2.0.9
org.apache.maven:maven-plugin-registry:2.0.9
org.apache.maven:maven-profile:2.0.9
org.apache.maven:maven-project:2.0.9
org.apache.maven:maven-repository-metadata:2.0.9
org.apache.maven:maven-settings:2.0.9
org.apache.maven.plugins:maven-antrun-plugin:1.3
org.apache.maven.plugins:maven-assembly-plugin:2.2-beta-5
org.apache.maven.plugins:maven-clean-plugin:2.5
org.apache.maven.plugins:maven-dependency-plugin:2.8
org.apache.maven.plugins:maven-deploy-plugin:2.7
org.apache.maven.plugins:maven-install-plugin:2.4
org.apache.maven.plugins:maven-site-plugin:3.3
org.apache.maven.reporting:maven-reporting-api:3.0
org.apache.maven.reporting:maven-reporting-impl:2.0.5
org.apache.maven.shared:file-management:1.2.1
org.apache.maven.shared:maven-common-artifact-filters:1.4
org.apache.maven.shared:maven-dependency-analyzer:1.4
org.apache.maven.shared:maven-dependency-tree:2.1
org.apache.maven.shared:maven-doxia-tools:1.0.2
org.apache.maven.shared:maven-invoker:2.0.11
org.apache.maven.shared:maven-shared-io:1.1
org.apache.maven.wagon:wagon-provider-api:1.0-alpha-6
org.apache.thrift:libthrift:0.14.1
org.apache.velocity:velocity:1.5
org.apache.yetus:audience-annotations:0.13.0
org.apache.zookeeper:zookeeper-jute:3.8.4
org.apache.zookeeper:zookeeper:3.8.4
org.checkerframework:checker-qual:3.1.0
org.codehaus.jackson:jackson-core-asl:1.9.13
org.codehaus.jackson:jackson-jaxrs:1.9.13
org.codehaus.jackson:jackson-mapper-asl:1.9.13
org.codehaus.jackson:jackson-xc:1.9.13
org.codehaus.jettison:jettison:1.1
org.codehaus.plexus:plexus-archiver:2.3
org.codehaus.plexus:plexus-component-annotations:1.5.5
org.codehaus.plexus:plexus-container-default:1.0-alpha-9-stable-1
org.codehaus.plexus:plexus-i18n:1.0-beta-7
org.codehaus.plexus:plexus-interactivity-api:1.0-alpha-4
org.codehaus.plexus:plexus-io:2.0.6
org.codehaus.plexus:plexus-utils:3.0.9
org.codehaus.plexus:plexus-velocity:1.1.7
org.codehaus.woodstox:stax2-api:4.2.1
org.eclipse.aether:aether-util:0.9.0.M2
org.ehcache:ehcache:3.3.1
org.fusesource.leveldbjni:leveldbjni-all:1.8
org.glassfish.hk2.external:jakarta.inject:2.6.1
org.glassfish:javax.el:3.0.1-b08
org.glassfish.web:javax.servlet.jsp:2.3.2
org.jamon:jamon-runtime:2.4.1
org.javassist:javassist:3.30.2-GA
org.jruby.jcodings:jcodings:1.0.58
org.jruby.joni:joni:2.2.1
org.slf4j:slf4j-api:1.7.33
org.slf4j:slf4j-reload4j:1.7.36
org.xerial.snappy:snappy-java:1.1.10.4
oro:oro:2.0.8
xerces:xercesImpl:2.12.0
xml-apis:xml-apis:1.0.b2
xml-apis:xml-apis:1.4.01
xmlenc:xmlenc:0.52
"""


def ensure_hbase_jars(cache_dir: str | os.PathLike[str] | None = None, progress: bool | None = None) -> list[Path]:
    """Paths of every jar HBase needs under ``$OMNI_CACHE/hbase-<version>/jars``, downloading
    (and sha1-checking) the missing ones; the trap jars are not in the lock (module docstring)."""
    return ensure_locked_jars(f"hbase-{HBASE_VERSION}", _LOCK, _FIX, cache_dir, progress)


def write_hbase_site(conf_dir: str | os.PathLike[str], data_dir: str | os.PathLike[str], *, zookeeper_port: int,
                     master_port: int = 0, regionserver_port: int = 0, host: str = "127.0.0.1") -> Path:
    """Write ``hbase-site.xml`` for a standalone HBase whose data lives under ``data_dir``.

    Why each setting: ``cluster.distributed=false`` runs master, region server and
    ZooKeeper in one JVM; ``rootdir`` is a local ``file://`` folder, which has no
    hflush/hsync, hence ``unsafe.stream.capability.enforce=false`` (else the WAL refuses
    to start); info (web UI) ports are -1 so parallel test servers never collide; all
    other ports are the caller's free ports on 127.0.0.1 (0 lets HBase pick). No
    ``hbase.master.hostname``: in standalone mode master and region server are one
    process, and a forced ``127.0.0.1`` makes the region server abort when the master's
    reverse lookup calls it ``localhost`` ("Master passed us a different hostname").
    """
    conf = Path(conf_dir)
    data = Path(data_dir).resolve()
    conf.mkdir(parents=True, exist_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    props = {
        "hbase.cluster.distributed": "false",
        "hbase.rootdir": (data / "hbase").as_uri(),
        "hbase.tmp.dir": str(data / "tmp"),
        "hbase.zookeeper.property.dataDir": str(data / "zookeeper"),
        "hbase.zookeeper.quorum": host,
        "hbase.zookeeper.property.clientPort": str(zookeeper_port),
        "hbase.unsafe.stream.capability.enforce": "false",
        "hbase.master.info.port": "-1",
        "hbase.regionserver.info.port": "-1",
        "hbase.master.port": str(master_port),
        "hbase.regionserver.port": str(regionserver_port),
        "hbase.zookeeper.property.maxClientCnxns": "200",
    }
    body = "\n".join(f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>"
                     for k, v in props.items())
    path = conf / "hbase-site.xml"
    path.write_text(f'<?xml version="1.0"?>\n<configuration>\n{body}\n</configuration>\n')
    (conf / "log4j2.properties").write_text(
        "status = warn\nappender.console.type = Console\nappender.console.name = STDOUT\n"
        "appender.console.layout.type = PatternLayout\nappender.console.layout.pattern = %d %p %c{1}: %m%n\n"
        "rootLogger = warn,STDOUT\n"
    )
    return path


def classpath(conf_dir: str | os.PathLike[str], jars: list[Path]) -> str:
    """The conf folder first (HBase reads ``hbase-site.xml`` from the classpath), then the jars."""
    return os.pathsep.join([str(Path(conf_dir).resolve())] + [str(j) for j in jars])


def java_command(conf_dir: str | os.PathLike[str], jars: list[Path], main: str, *args: str,
                 java: str | None = None) -> list[str]:
    """The command line that runs ``main`` with the HBase classpath."""
    return [java or os.environ.get("OMNI_JAVA", "java"), *JVM_FLAGS, "-cp", classpath(conf_dir, jars), main, *args]


def presplit_table(conf_dir: str | os.PathLike[str], jars: list[Path], table: str, family: str, regions: int,
                   *, timeout_s: float = 180.0) -> None:
    """Create ``table`` with ``regions`` regions splitting the raw key space evenly.

    Thrift 1 (what ``happybase`` speaks) cannot pass split keys to ``createTable``, so
    this runs HBase's own ``RegionSplitter`` with ``UniformSplit`` (even splits of
    the byte space, right for keys that start with 16 raw md5/uuid bytes).
    """
    cmd = java_command(conf_dir, jars, REGION_SPLITTER_MAIN, table, "UniformSplit", "-c", str(regions), "-f", family)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        raise ConfigError(f"creating pre-split HBase table {table} took over {timeout_s:.0f}s; is HBase up?") from e
    if done.returncode != 0:
        raise ConfigError(f"creating pre-split HBase table {table} failed (exit {done.returncode}): "
                          f"{done.stderr.strip()[-800:]}")


if __name__ == "__main__":  # pragma: no cover - set-up scripts
    jars = ensure_hbase_jars(progress=True)
    print(f"HBase jars: {len(jars)} in {jars[0].parent if jars else '-'}")
