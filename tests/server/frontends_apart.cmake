cmake_minimum_required(VERSION 3.16)  # IN_LIST in script mode
# server.frontends_apart (cmake -P): the HTTP frontend (server/http) and the gRPC frontend
# (server/grpc) reach each other neither by an include nor by a link (docs/layout.md: both call
# the request pipeline, neither reaches into the other).
#   -DROOT=<repository> -DHTTP_LINKS=<nmt_server_http's link closure> -DGRPC_LINKS=<...>
foreach(pair "http;grpc" "grpc;http")
  list(GET pair 0 from)
  list(GET pair 1 to)
  file(GLOB_RECURSE sources "${ROOT}/server/${from}/*.h" "${ROOT}/server/${from}/*.cc")
  list(LENGTH sources count)
  if(count EQUAL 0)
    message(FATAL_ERROR "no sources under ${ROOT}/server/${from}: the check would pass vacuously")
  endif()
  foreach(source ${sources})
    file(STRINGS "${source}" hits REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]server/${to}/")
    if(hits)
      message(SEND_ERROR "${source} includes the ${to} frontend: ${hits}")
    endif()
  endforeach()
  string(TOUPPER "${from}" upper)
  string(REPLACE "," ";" ${upper}_LINKS "${${upper}_LINKS}")
  if("nmt_server_${to}" IN_LIST ${upper}_LINKS)
    message(SEND_ERROR "nmt_server_${from} links nmt_server_${to} (its link closure: ${${upper}_LINKS})")
  endif()
  message(STATUS "server/${from}: ${count} files, none includes server/${to}/; nmt_server_${from} does not link nmt_server_${to}")
endforeach()
