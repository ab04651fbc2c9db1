"""A TCP forwarder for the real node (hack/lib/real-node.sh): the kubelet and the pods live in a
network namespace of their own, the kube-apiserver listens on the host's loopback only. This
process, in the host's namespace, listens on the host end of the node's veth and copies bytes to
127.0.0.1:PORT (TLS passes through untouched; the kubelet checks the apiserver's certificate).

Usage: python3 forward.py LISTEN_HOST LISTEN_PORT TARGET_PORT
"""

import asyncio
import sys


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def main(host: str, port: int, target: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(handle, host, port, reuse_address=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
