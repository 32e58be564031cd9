SUMMARY = "unwound crash reporting on the device"
DESCRIPTION = "Add to IMAGE_INSTALL to report crashes with unwound."

inherit packagegroup

RDEPENDS:${PN} = "unwound"
