"""s3proxy: a real S3-API server from Maven Central, on the local filesystem.

No MinIO installs here and moto's server is a mock, so the S3 warehouse tests use
``org.gaul:s3proxy`` 2.4.1 with its jclouds ``filesystem`` backend: buckets are folders,
objects are files, and the wire protocol is real S3 (SigV2/SigV4 auth, multipart
uploads). :data:`_LOCK` is its dependency tree as ``mvn dependency:list`` resolved it on
2026-11-30, minus the macOS/Windows native netty jars no Linux JVM loads.

Recipe (TOOLCHAIN.md): ``java -cp JARS org.gaul.s3proxy.Main --properties FILE`` where
FILE sets the endpoint, ``aws-v2-or-v4`` authorization, an identity/credential pair and
``jclouds.provider=filesystem`` with its ``basedir`` (:func:`write_properties`). Current
AWS SDKs (pyarrow's included) must send checksums only when required
(``AWS_REQUEST_CHECKSUM_CALCULATION=WHEN_REQUIRED``, ``AWS_RESPONSE_CHECKSUM_VALIDATION=
WHEN_REQUIRED``), or uploads fail with ``XAmzContentSHA256Mismatch``; see
:data:`CLIENT_ENVIRONMENT`.
"""

from __future__ import annotations

import os
from pathlib import Path

from omni_iceberg.toolchain.maven_lock import ensure_locked_jars, jvm_command

S3PROXY_VERSION = "2.4.1"
MAIN = "org.gaul.s3proxy.Main"
_NAME = f"s3proxy-{S3PROXY_VERSION}"
_FIX = ("run `python -m omni_iceberg.toolchain.s3proxy` where Maven Central is reachable, "
        f"or point OMNI_CACHE at a folder whose {_NAME}/jars holds them")

#: What an AWS-SDK client (pyarrow's S3FileSystem) needs in its environment for s3proxy.
CLIENT_ENVIRONMENT = {"AWS_REQUEST_CHECKSUM_CALCULATION": "WHEN_REQUIRED",
                      "AWS_RESPONSE_CHECKSUM_VALIDATION": "WHEN_REQUIRED"}

_LOCK = """
aopalliance:aopalliance:1.0
args4j:args4j:2.37
ch.qos.logback:logback-classic:1.5.12
ch.qos.logback:logback-core:1.5.12
com.azure:azure-core-http-netty:1.15.4
com.azure:azure-core:1.52.0
com.azure:azure-identity:1.13.3
com.azure:azure-json:1.3.0
com.azure:azure-storage-blob:12.28.0
com.azure:azure-storage-common:12.27.0
com.azure:azure-storage-internal-avro:12.13.0
com.azure:azure-xml:1.1.0
com.fasterxml.jackson.core:jackson-annotations:2.18.1
com.fasterxml.jackson.core:jackson-core:2.18.1
com.fasterxml.jackson.core:jackson-databind:2.18.1
com.fasterxml.jackson.dataformat:jackson-dataformat-xml:2.18.1
com.fasterxml.jackson.datatype:jackson-datatype-jsr310:2.17.2
com.fasterxml.woodstox:woodstox-core:7.0.0
com.github.stephenc.jcip:jcip-annotations:1.0-1
com.google.auto.service:auto-service-annotations:1.1.1
com.google.auto.service:auto-service:1.1.1
com.google.auto:auto-common:1.2.1
com.google.code.findbugs:jsr305:3.0.2
com.google.code.gson:gson:2.10.1
com.google.errorprone:error_prone_annotations:2.18.0
com.google.guava:failureaccess:1.0.1
com.google.guava:guava:32.0.0-jre
com.google.guava:listenablefuture:9999.0-empty-to-avoid-conflict-with-guava
com.google.inject.extensions:guice-assistedinject:7.0.0
com.google.inject:guice:7.0.0
com.google.j2objc:j2objc-annotations:2.8
com.google.jimfs:jimfs:1.3.0
com.microsoft.azure:msal4j-persistence-extension:1.3.0
com.microsoft.azure:msal4j:1.17.1
com.nimbusds:content-type:2.3
com.nimbusds:lang-tag:1.7
com.nimbusds:nimbus-jose-jwt:9.40
com.nimbusds:oauth2-oidc-sdk:11.18
com.sun.activation:jakarta.activation:1.2.2
com.sun.xml.bind:jaxb-impl:2.3.3
commons-codec:commons-codec:1.15
commons-fileupload:commons-fileupload:1.5
commons-io:commons-io:2.11.0
io.netty:netty-buffer:4.1.110.Final
io.netty:netty-codec-dns:4.1.109.Final
io.netty:netty-codec-http2:4.1.110.Final
io.netty:netty-codec-http:4.1.110.Final
io.netty:netty-codec-socks:4.1.110.Final
io.netty:netty-codec:4.1.110.Final
io.netty:netty-common:4.1.110.Final
io.netty:netty-handler-proxy:4.1.110.Final
io.netty:netty-handler:4.1.110.Final
io.netty:netty-resolver-dns-classes-macos:4.1.109.Final
io.netty:netty-resolver-dns:4.1.109.Final
io.netty:netty-resolver:4.1.110.Final
io.netty:netty-tcnative-boringssl-static:2.0.65.Final
io.netty:netty-tcnative-boringssl-static:2.0.65.Final:linux-aarch_64
io.netty:netty-tcnative-boringssl-static:2.0.65.Final:linux-x86_64
io.netty:netty-tcnative-classes:2.0.65.Final
io.netty:netty-transport-classes-epoll:4.1.110.Final
io.netty:netty-transport-classes-kqueue:4.1.110.Final
io.netty:netty-transport-native-epoll:4.1.110.Final:linux-x86_64
io.netty:netty-transport-native-unix-common:4.1.110.Final
io.netty:netty-transport:4.1.110.Final
io.projectreactor.netty:reactor-netty-core:1.0.45
io.projectreactor.netty:reactor-netty-http:1.0.45
io.projectreactor:reactor-core:3.4.38
jakarta.annotation:jakarta.annotation-api:2.0.0
jakarta.inject:jakarta.inject-api:2.0.1
jakarta.ws.rs:jakarta.ws.rs-api:3.0.0
jakarta.xml.bind:jakarta.xml.bind-api:2.3.3
javax.activation:javax.activation-api:1.2.0
javax.annotation:javax.annotation-api:1.3.2
javax.xml.bind:jaxb-api:2.3.1
net.java.dev.jna:jna-platform:5.6.0
net.java.dev.jna:jna:5.13.0
net.minidev:accessors-smart:2.5.0
net.minidev:json-smart:2.5.0
org.apache.jclouds.api:atmos:2.6.0
org.apache.jclouds.api:filesystem:2.6.0
org.apache.jclouds.api:glacier:2.6.0
org.apache.jclouds.api:oauth:2.6.0
org.apache.jclouds.api:openstack-keystone:2.6.0
org.apache.jclouds.api:openstack-swift:2.6.0
org.apache.jclouds.api:rackspace-cloudfiles:2.6.0
org.apache.jclouds.api:rackspace-cloudidentity:2.6.0
org.apache.jclouds.api:s3:2.6.0
org.apache.jclouds.api:sts:2.6.0
org.apache.jclouds.common:googlecloud:2.6.0
org.apache.jclouds.driver:jclouds-slf4j:2.6.0
org.apache.jclouds.provider:aws-s3:2.6.0
org.apache.jclouds.provider:azureblob:2.6.0
org.apache.jclouds.provider:b2:2.6.0
org.apache.jclouds.provider:google-cloud-storage:2.6.0
org.apache.jclouds.provider:rackspace-cloudfiles-uk:2.6.0
org.apache.jclouds.provider:rackspace-cloudfiles-us:2.6.0
org.apache.jclouds:jclouds-allblobstore:2.6.0
org.apache.jclouds:jclouds-blobstore:2.6.0
org.apache.jclouds:jclouds-core:2.6.0
org.checkerframework:checker-qual:3.33.0
org.codehaus.woodstox:stax2-api:4.2.2
org.eclipse.jetty.toolchain:jetty-jakarta-servlet-api:5.0.2
org.eclipse.jetty:jetty-http:11.0.24
org.eclipse.jetty:jetty-io:11.0.24
org.eclipse.jetty:jetty-security:11.0.24
org.eclipse.jetty:jetty-server:11.0.24
org.eclipse.jetty:jetty-servlet:11.0.24
org.eclipse.jetty:jetty-util:11.0.24
org.gaul:s3proxy:2.4.1
org.ow2.asm:asm:9.3
org.reactivestreams:reactive-streams:1.0.4
org.slf4j:slf4j-api:2.0.16
"""


def ensure_s3proxy_jars(cache_dir: str | os.PathLike[str] | None = None, progress: bool | None = None) -> list[Path]:
    """Every jar of s3proxy's classpath, downloading (sha1-checked) the missing ones."""
    return ensure_locked_jars(_NAME, _LOCK, _FIX, cache_dir, progress)


def write_properties(path: str | os.PathLike[str], *, host: str, port: int, basedir: str | os.PathLike[str],
                     identity: str, credential: str) -> Path:
    """Write s3proxy's properties file (it holds the credential: the caller keeps it private)."""
    out = Path(path)
    Path(basedir).mkdir(parents=True, exist_ok=True)
    props = {
        "s3proxy.endpoint": f"http://{host}:{port}",
        "s3proxy.authorization": "aws-v2-or-v4",
        "s3proxy.identity": identity,
        "s3proxy.credential": credential,
        "jclouds.provider": "filesystem",
        "jclouds.filesystem.basedir": str(Path(basedir).resolve()),
    }
    out.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    os.chmod(out, 0o600)
    return out


def java_command(jars: list[Path], properties_file: str | os.PathLike[str], java: str | None = None) -> list[str]:
    """The command line that runs s3proxy with ``jars`` and ``properties_file``."""
    return jvm_command(jars, MAIN, "--properties", str(properties_file), heap="384m", java=java)


if __name__ == "__main__":  # pragma: no cover - set-up script
    jars = ensure_s3proxy_jars(progress=True)
    print(f"s3proxy jars: {len(jars)} in {jars[0].parent}")
