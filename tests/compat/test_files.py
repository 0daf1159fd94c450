"""Files through `Client.{push,pull,list_files,make_dir,remove_path}` and raw HTTP.

Pebble facts pinned here (daemon/api_files.go, osutil/{io,mkdir}.go):
- push writes atomically (temp file `<name>.<n>~` in the same directory, fsync, rename),
  mode 0644 unless given, set with fchmod so the umask does not apply; `make_dirs` creates
  parents with mode 0755 owned like the file;
- permissions must be exactly 3 octal digits (`permissions must be a 3-digit octal string,
  got "1000"`, kind generic-file-error);
- errors are Go `*PathError` texts: not-found for ENOENT, generic-file-error otherwise;
- list_files: `stat <path>: no such file or directory` as an HTTP 404 (what
  `Container.exists()`/`isdir()` rely on), entries sorted, symlinks not followed inside a
  directory, size only for regular files, permissions without setuid/setgid/sticky;
- make_dir with make_parents leaves an existing directory's mode alone;
- remove_path: non-recursive is os.Remove, recursive is os.RemoveAll (missing is fine);
- a malformed multipart push is a 400 and leaves the old file intact.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import socket
import stat

import ops
import pytest

from conftest import Daemon

PathError = ops.pebble.PathError
APIError = ops.pebble.APIError
FileType = ops.pebble.FileType

BOUNDARY = '0123456789abcdef0123456789abcdef'


@pytest.fixture
def work(daemon: Daemon) -> pathlib.Path:
    d = daemon.dir / 'files'
    d.mkdir()
    return d


def temp_leftovers(directory: pathlib.Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(('~', '.mkdir-new'))]


def test_push_pull_text_bytes_binary_and_large(client: ops.pebble.Client, work: pathlib.Path):
    client.push(str(work / 'text'), 'héllo\nwörld\n')
    with client.pull(str(work / 'text')) as f:
        assert f.read() == 'héllo\nwörld\n'

    client.push(str(work / 'sjis'), '日本語', encoding='shift-jis')
    assert (work / 'sjis').read_bytes() == '日本語'.encode('shift-jis')

    binary = bytes(range(256)) * 17
    client.push(work / 'bin', io.BytesIO(binary))
    with client.pull(work / 'bin', encoding=None) as f:
        assert f.read() == binary

    large = os.urandom(5 * 1024 * 1024 + 7)  # ops parses pulls in O(n^2); keep it modest
    client.push(str(work / 'large'), large)
    assert (work / 'large').read_bytes() == large
    with client.pull(str(work / 'large'), encoding=None) as f:
        assert f.read() == large

    client.push(str(work / 'empty'), b'')
    with client.pull(str(work / 'empty'), encoding=None) as f:
        assert f.read() == b''
    assert temp_leftovers(work) == []


def test_push_replaces_the_inode_and_applies_modes(client: ops.pebble.Client, work: pathlib.Path):
    target = work / 'f'
    target.write_text('old')
    old_inode = target.stat().st_ino
    client.push(str(target), 'new')
    assert target.read_text() == 'new'
    assert target.stat().st_ino != old_inode
    assert stat.S_IMODE(target.stat().st_mode) == 0o644

    client.push(str(target), 'x', permissions=0o600)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    client.push(str(target), 'x', permissions=0o777)
    assert stat.S_IMODE(target.stat().st_mode) == 0o777

    for bad, text in ((0o1000, '1000'), (-1, '-01')):
        with pytest.raises(PathError) as excinfo:
            client.push(str(target), 'bad', permissions=bad)
        assert excinfo.value.kind == 'generic-file-error'
        assert excinfo.value.message == (
            f'permissions must be a 3-digit octal string, got "{text}"'
        )
    assert target.read_text() == 'x'


def test_push_make_dirs_and_owners(client: ops.pebble.Client, work: pathlib.Path):
    with pytest.raises(PathError) as excinfo:
        client.push(str(work / 'a/b/f'), 'data')
    assert excinfo.value.kind == 'not-found'
    assert excinfo.value.message.startswith(f'open {work}/a/b/f.')
    assert excinfo.value.message.endswith('~: no such file or directory')

    client.push(str(work / 'a/b/f'), 'data', make_dirs=True, user='nobody', permissions=0o640)
    f = (work / 'a/b/f').stat()
    assert (f.st_uid, f.st_gid) == (65534, 65534)
    assert stat.S_IMODE(f.st_mode) == 0o640
    for parent in (work / 'a', work / 'a/b'):
        st = parent.stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (65534, 65534, 0o755)

    client.push(str(work / 'g'), 'data', user_id=65534, group='nogroup')
    assert (work / 'g').stat().st_gid == 65534

    with pytest.raises(PathError) as excinfo:
        client.push(str(work / 'h'), 'data', group='nogroup')
    assert excinfo.value.message == (
        'cannot look up user and group: must specify user, not just group'
    )
    with pytest.raises(PathError) as excinfo:
        client.push(str(work / 'h'), 'data', user='no-such-user-here')
    assert excinfo.value.message == (
        'cannot look up user and group: user: unknown user no-such-user-here'
    )
    with pytest.raises(PathError) as excinfo:
        client.push(str(work / 'h'), 'data', user='nobody', user_id=1)
    assert excinfo.value.message == (
        'cannot look up user and group: user "nobody" UID (65534) does not match user-id (1)'
    )
    assert not (work / 'h').exists()


def test_push_errors(client: ops.pebble.Client, work: pathlib.Path):
    (work / 'file').write_text('x')
    with pytest.raises(PathError) as excinfo:
        client.push(str(work / 'file/child'), 'data')
    assert excinfo.value.kind == 'generic-file-error'
    assert 'not a directory' in excinfo.value.message

    with pytest.raises(PathError) as excinfo:
        client.push('relative/path', 'data')
    assert excinfo.value.kind == 'generic-file-error'
    assert excinfo.value.message == 'paths must be absolute, got "relative/path"'

    # A push onto a directory fails at the rename and leaves the directory alone.
    (work / 'dir').mkdir()
    (work / 'dir/keep').write_text('keep')
    with pytest.raises(PathError) as excinfo:
        client.push(str(work / 'dir'), 'data')
    assert excinfo.value.kind == 'generic-file-error'
    assert excinfo.value.message.startswith(f'rename {work}/dir.')
    # Go's os.Rename refuses a directory as the target with EEXIST, as Pebble reports it.
    assert excinfo.value.message.endswith(f'~ {work}/dir: file exists')
    assert (work / 'dir/keep').read_text() == 'keep'
    assert temp_leftovers(work) == []


def test_pull_errors(client: ops.pebble.Client, work: pathlib.Path):
    with pytest.raises(PathError) as excinfo:
        client.pull(str(work / 'missing'))
    assert excinfo.value.kind == 'not-found'
    assert excinfo.value.message == f'stat {work}/missing: no such file or directory'

    with pytest.raises(PathError) as excinfo:
        client.pull(str(work))
    assert excinfo.value.kind == 'generic-file-error'
    assert excinfo.value.message == f'can only read a regular file: "{work}"'

    with pytest.raises(PathError) as excinfo:
        client.pull('relative')
    assert excinfo.value.message == 'paths must be absolute, got "relative"'


def test_pull_multiple_paths_has_one_part_each_and_a_response(daemon: Daemon, work: pathlib.Path):
    (work / 'one').write_text('1')
    (work / 'two').write_text('22')
    resp = daemon.raw(
        'GET',
        f'/v1/files?action=read&path={work}/one&path={work}/nope&path={work}/two',
        headers={'Accept': 'multipart/form-data'},
    )
    assert resp.status == 200
    content_type = resp.headers['Content-Type']
    assert content_type.startswith('multipart/form-data; boundary=')
    boundary = content_type.split('=', 1)[1]
    assert len(boundary) == 60
    body = resp.body.decode()
    # Go's writer: no CRLF before the first boundary, headers sorted, closing boundary.
    assert body.startswith(
        f'--{boundary}\r\nContent-Disposition: form-data; name="files"; '
        f'filename="{work}/one"\r\nContent-Type: application/octet-stream\r\n\r\n1\r\n'
    )
    assert body.endswith(f'\r\n--{boundary}--\r\n')
    response = body.rsplit('name="response"\r\nContent-Type: application/json\r\n\r\n', 1)[1]
    nope_error = (
        f'{{"message":"stat {work}/nope: no such file or directory","kind":"not-found"}}'
    )
    assert response == (
        '{"type":"sync","status-code":200,"status":"OK","result":['
        f'{{"path":"{work}/one"}},{{"path":"{work}/nope","error":{nope_error}}},'
        f'{{"path":"{work}/two"}}]}}\n\r\n--{boundary}--\r\n'
    )

    bad_accept = daemon.raw('GET', f'/v1/files?action=read&path={work}/one')
    assert bad_accept.status == 400
    assert bad_accept.json['result']['message'] == 'must accept multipart/form-data'


def test_list_files_types_pattern_itself_and_404(client: ops.pebble.Client, work: pathlib.Path):
    (work / 'file.txt').write_text('four')
    os.chmod(work / 'file.txt', 0o4755)  # setuid is not reported
    (work / 'dir').mkdir()
    os.symlink('file.txt', work / 'link')
    os.mkfifo(work / 'fifo')
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(work / 'sock'))
    os.symlink('/dev/null', work / 'devlink')
    try:
        infos = client.list_files(str(work))
    finally:
        sock.close()
    by_name = {i.name: i for i in infos}
    assert [i.name for i in infos] == sorted(by_name)
    assert by_name['file.txt'].type == FileType.FILE
    assert by_name['file.txt'].size == 4
    assert by_name['file.txt'].permissions == 0o755
    assert by_name['file.txt'].path == f'{work}/file.txt'
    assert by_name['file.txt'].user == 'root' and by_name['file.txt'].user_id == 0
    assert by_name['dir'].type == FileType.DIRECTORY and by_name['dir'].size is None
    assert by_name['link'].type == FileType.SYMLINK
    assert by_name['fifo'].type == FileType.NAMED_PIPE
    assert by_name['sock'].type == FileType.SOCKET
    assert by_name['devlink'].type == FileType.SYMLINK

    # The named path itself is followed: a symlink to a device lists as the device.
    [dev] = client.list_files(str(work / 'devlink'))
    assert dev.type == FileType.DEVICE and dev.path == f'{work}/devlink'

    assert [i.name for i in client.list_files(str(work), pattern='f*')] == ['fifo', 'file.txt']
    assert client.list_files(str(work), pattern='zz*') == []

    [itself] = client.list_files(str(work / 'dir'), itself=True)
    assert (itself.name, itself.path, itself.type) == ('dir', f'{work}/dir', FileType.DIRECTORY)
    [root] = client.list_files('/', itself=True)
    assert (root.name, root.path) == ('/', '/')

    with pytest.raises(APIError) as excinfo:
        client.list_files(str(work / 'missing'))
    assert excinfo.value.code == 404
    assert excinfo.value.message == f'stat {work}/missing: no such file or directory'
    with pytest.raises(APIError) as excinfo:
        client.list_files(str(work), pattern='[')
    assert (excinfo.value.code, excinfo.value.message) == (400, 'syntax error in pattern')
    with pytest.raises(APIError) as excinfo:
        client.list_files('relative')
    assert (excinfo.value.code, excinfo.value.message) == (
        400,
        'path must be absolute, got "relative"',
    )


def exists(client: ops.pebble.Client, path: str) -> bool:
    """What ops.model.Container.exists() does."""
    try:
        client.list_files(path, itself=True)
    except APIError as err:
        if err.code == 404:
            return False
        raise
    return True


def isdir(client: ops.pebble.Client, path: str) -> bool:
    """What ops.model.Container.isdir() does."""
    try:
        files = client.list_files(path, itself=True)
    except APIError as err:
        if err.code == 404:
            return False
        raise
    return files[0].type == FileType.DIRECTORY


def test_container_style_exists_and_isdir(client: ops.pebble.Client, work: pathlib.Path):
    (work / 'f').write_text('x')
    assert exists(client, str(work / 'f')) and not isdir(client, str(work / 'f'))
    assert exists(client, str(work)) and isdir(client, str(work))
    assert not exists(client, str(work / 'missing'))
    assert not isdir(client, str(work / 'missing/deeper'))


def test_make_dir(client: ops.pebble.Client, work: pathlib.Path):
    client.make_dir(str(work / 'd'))
    assert stat.S_IMODE((work / 'd').stat().st_mode) == 0o755
    with pytest.raises(PathError) as excinfo:
        client.make_dir(str(work / 'd'))
    assert (excinfo.value.kind, excinfo.value.message) == (
        'generic-file-error',
        f'mkdir {work}/d: file exists',
    )
    with pytest.raises(PathError) as excinfo:
        client.make_dir(str(work / 'x/y'))
    assert excinfo.value.kind == 'not-found'

    os.chmod(work / 'd', 0o711)
    client.make_dir(str(work / 'd/e/f'), make_parents=True, permissions=0o700, user='nobody')
    for made in (work / 'd/e', work / 'd/e/f'):
        st = made.stat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o700, 65534, 65534)
    # An existing directory is left exactly as it was.
    client.make_dir(str(work / 'd'), make_parents=True, permissions=0o777)
    st = (work / 'd').stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o711, 0)

    with pytest.raises(PathError) as excinfo:
        client.make_dir(str(work / 'bad'), permissions=0o1000)
    assert excinfo.value.message == 'permissions must be a 3-digit octal string, got "1000"'
    with pytest.raises(PathError) as excinfo:
        client.make_dir('rel')
    assert excinfo.value.kind == 'generic-file-error'
    assert temp_leftovers(work) == []


def test_remove_path(client: ops.pebble.Client, work: pathlib.Path):
    (work / 'd/sub').mkdir(parents=True)
    (work / 'd/sub/f').write_text('x')
    with pytest.raises(PathError) as excinfo:
        client.remove_path(str(work / 'd'))
    assert (excinfo.value.kind, excinfo.value.message) == (
        'generic-file-error',
        f'remove {work}/d: directory not empty',
    )
    with pytest.raises(PathError) as excinfo:
        client.remove_path(str(work / 'missing'))
    assert (excinfo.value.kind, excinfo.value.message) == (
        'not-found',
        f'remove {work}/missing: no such file or directory',
    )
    client.remove_path(str(work / 'missing'), recursive=True)
    client.remove_path(str(work / 'd'), recursive=True)
    assert not (work / 'd').exists()


def multipart_push(daemon: Daemon, parts: list[tuple[str, str | None, bytes]], tail: bytes):
    """POST /v1/files with hand-made parts (name, filename, content) and a given ending."""
    body = b''
    for i, (name, filename, content) in enumerate(parts):
        disposition = f'form-data; name="{name}"'
        if filename is not None:
            disposition += f'; filename="{filename}"'
        body += (b'\r\n' if i else b'') + (
            f'--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n'.encode() + content
        )
    body += tail
    return daemon.raw(
        'POST',
        '/v1/files',
        body,
        headers={'Content-Type': f'multipart/form-data; boundary="{BOUNDARY}"'},
    )


def request_part(*paths: str, **extra) -> tuple[str, None, bytes]:
    files = [{'path': p, **extra} for p in paths]
    return ('request', None, json.dumps({'action': 'write', 'files': files}).encode())


CLOSE = f'\r\n--{BOUNDARY}--\r\n'.encode()


def test_bad_multipart_pushes_leave_the_old_file(daemon: Daemon, work: pathlib.Path):
    target = work / 'keep'
    target.write_text('old')
    path = str(target)

    def check_intact():
        assert target.read_text() == 'old'
        assert temp_leftovers(work) == []

    # Truncated body: the file part never ends.
    resp = multipart_push(daemon, [request_part(path), ('files', path, b'new' * 1000)], b'')
    assert resp.status == 400
    assert resp.json['result']['message'].startswith("cannot read file part 1: ")
    check_intact()

    # Missing request part.
    resp = multipart_push(daemon, [('files', path, b'new')], CLOSE)
    assert resp.status == 400
    assert resp.json['result']['message'] == (
        'metadata field name must be "request", got "files"'
    )
    check_intact()

    # A part for a path the metadata does not list (including a `..` spelling of it).
    for other in (str(work / 'other'), f'{work}/../{work.name}/keep'):
        resp = multipart_push(daemon, [request_part(path), ('files', other, b'new')], CLOSE)
        assert resp.status == 400
        assert resp.json['result']['message'] == f'no metadata for path "{other}"'
    check_intact()

    # Metadata with no content part: a per-path error.
    resp = multipart_push(daemon, [request_part(path)], CLOSE)
    assert resp.status == 200
    assert resp.json['result'] == [
        {
            'path': path,
            'error': {
                'message': f'no file content for path "{path}"',
                'kind': 'generic-file-error',
            },
        }
    ]
    check_intact()

    # Bad permissions.
    resp = multipart_push(
        daemon, [request_part(path, permissions='1000'), ('files', path, b'new')], CLOSE
    )
    assert resp.status == 200
    assert resp.json['result'][0]['error']['message'] == (
        'permissions must be a 3-digit octal string, got "1000"'
    )
    check_intact()

    # Relative paths, `..` included.
    resp = multipart_push(
        daemon, [request_part('../keep'), ('files', '../keep', b'new')], CLOSE
    )
    assert resp.json['result'][0]['error']['message'] == 'paths must be absolute, got "../keep"'
    check_intact()

    # Boundary rules (Pebble's: at least 32 characters, no upper bound) and the media type.
    for short in ['short', 'c' * 31]:
        resp = daemon.raw(
            'POST', '/v1/files', b'x',
            headers={'Content-Type': f'multipart/form-data; boundary={short}'},
        )
        assert (resp.status, resp.json['result']['message']) == (400, f'invalid boundary "{short}"')
    for long_enough in ['c' * 32, 'b' * 71]:
        resp = daemon.raw(
            'POST', '/v1/files', b'x',
            headers={'Content-Type': f'multipart/form-data; boundary={long_enough}'},
        )
        assert (resp.status, resp.json['result']['message']) == (
            400, 'cannot read request metadata: multipart: NextPart: EOF'
        )
    resp = daemon.raw('POST', '/v1/files', b'{"action":"write"}')
    assert resp.json['result']['message'] == 'must use multipart with "write" action'
    resp = daemon.raw('POST', '/v1/files', b'x', headers={'Content-Type': 'text/plain'})
    assert resp.json['result']['message'] == 'invalid media type "text/plain"'
    check_intact()

    # And a good one still works, with a quoted `"` in the path.
    quoted = str(work / 'q"uote')
    escaped = quoted.replace('"', '\\"')
    resp = multipart_push(daemon, [request_part(quoted), ('files', escaped, b'ok')], CLOSE)
    assert resp.status == 200 and resp.json['result'] == [{'path': quoted}]
    assert (work / 'q"uote').read_bytes() == b'ok'


def test_files_endpoints_need_admin_over_http(make_daemon):
    daemon = make_daemon(http=True)
    resp = daemon.raw_tcp('GET', '/v1/files?action=list&path=/')
    assert resp.status == 401
