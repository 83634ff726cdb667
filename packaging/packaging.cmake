# Installation and the Debian package (README "Operations: running as a service").
# `cmake --install build [--prefix P]` installs:
#   P/bin/kvd, P/bin/kvctl
#   P/lib*/libkvclient.so*, P/include/kvclient.h, P/lib*/pkgconfig/kvclient.pc (client/)
#   P/lib/systemd/system/kvd.service (Type=notify), and the environment file it reads,
#   /etc/default/kvd for P=/usr, else P/etc/default/kvd
# `cpack -G DEB` (in the build dir) builds kvd_<version>_<arch>.deb with prefix /usr and the
# maintainer scripts of packaging/debian/ (kvd user, /var/lib/kvd, the unit enabled and
# started). tests/pkg/ builds and unpacks it.
include(GNUInstallDirs)
# `cpack` (and `make install`) install what is built instead of first building every target
# (all the tests): tests/pkg/test_deb.c packages the binaries its dependencies built.
# `cmake --install` never builds anyway: build first (`cmake --build build`).
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY TRUE)
set(KVD_PKG_DIR ${CMAKE_CURRENT_LIST_DIR})

install(TARGETS kvd kvctl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
configure_file(${KVD_PKG_DIR}/install_service.cmake.in
               ${CMAKE_BINARY_DIR}/packaging/install_service.cmake @ONLY)
install(SCRIPT ${CMAKE_BINARY_DIR}/packaging/install_service.cmake)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kvd)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "kvd")
set(CPACK_PACKAGE_CONTACT "kvd maintainers <kvd@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Raft-replicated key-value store speaking the etcd v3 API (kvd, kvctl, libkvclient)")
# /etc/default/kvd is an absolute path in the package: install into a staging DESTDIR with
# the real prefix (install_service.cmake picks /etc for prefix /usr).
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # kvd_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION database)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Debian 12 (bookworm) package names of what kvd and kvctl link (tests/pkg checks ldd
# against this list); adduser for the postinst.
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libc6 (>= 2.34), libuv1 (>= 1.44), libprotobuf-c1, libssl3, liblmdb0, libnghttp2-14, libcrypt1, adduser")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${KVD_PKG_DIR}/debian/postinst ${KVD_PKG_DIR}/debian/prerm ${KVD_PKG_DIR}/debian/postrm
    ${KVD_PKG_DIR}/debian/conffiles ${KVD_PKG_DIR}/debian/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
